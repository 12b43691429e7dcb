// One program at a time in a run directory. Two trainers writing one --out interleave log.jsonl,
// replace each other's run_config.json and DONE markers, and one's start-up clean-up can take the
// other's checkpoint in flight; so a trainer locks --out for its whole run, before it reads
// anything there, and a second one is refused with the holder's pid and command line.
//
// The lock is a POSIX record lock (fcntl F_SETLK) on OUT/.lock, which the kernel drops when its
// process ends, however it ends: a lock left by a killed run is simply free again (the file
// stays; its text, the holder's pid, host and command, is cleared when a run ends normally, so
// a new run that finds text there says it takes over from a run that did not end cleanly).
// Rank 0 takes the whole file and then keeps byte 0; every other rank of the job then holds its
// own byte (rank r, byte r) where it sees the same file, so a new job is refused while any
// process of the old one lives (a rank that outlived a killed rank 0 still writing its state
// file). The result is broadcast: all ranks go on, or all stop with rank 0's message.
//
// A new run may make --out itself: if its start-up then fails or a signal ends it, the directory
// and the lock file it made are removed again (runlock_started marks the end of that window),
// so an interrupted or refused start-up leaves nothing behind.
#ifndef LLMC_RUNLOCK_H
#define LLMC_RUNLOCK_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RUNLOCK_FILE ".lock"

// Locks dir for this job (collective). dir is made when missing. fatal on rank 0 with the
// holder's pid and command when another process holds it. argv: the command recorded for others.
void runlock_acquire(Comm* comm, const char* dir, int argc, char** argv);
// The run has written its first file: from now on dir stays whatever happens.
void runlock_started(void);
// At the run's normal end (signals included): clears the holder's text (the lock itself goes
// with the process).
void runlock_release(void);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNLOCK_H
