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
// process of the old one lives. The result is broadcast: all ranks go on, or all stop with rank
// 0's message. A start-up that made --out and then fails removes it again (runlock_started marks
// the end of that window).
//
// The other programs that write into a directory (convert --out, data/prepare --out-dir, generate
// --logits-out, --out) keep trainers out while they write, but not one another: a writer holds a shared
// lock on the bytes the trainers lock ([0, 2^30)) and an exclusive lock on one byte per name it
// writes (2^30 + a hash of the name). Holding its names, a writer knows that the temporaries of
// those names ("NAME.tmp.<pid>") are no one's, whatever host or pid wrote them, and removes them
// (runlock_writer_clean). The last writer to end removes a .lock that a writer made. The file's
// text and bytes: docs/FORMATS.md ("The run directory").
#ifndef LLMC_RUNLOCK_H
#define LLMC_RUNLOCK_H

#include <stdio.h>
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

// A writer's lock on dir (see above) for the names it writes there (file names; prepare: its output
// prefix), held until runlock_writer_release or the process ends; fatal with the holder's pid and
// command, and the flag (e.g. "--out-dir") named, while a trainer or a writer of one of the names
// holds it. Returns 1 when held (the names' temporaries are stale), 0 when dir does not exist, the
// lock file cannot be opened for writing, or the file system has no locks (with a warning): then
// nothing is locked. Once a process (later calls return the first's result).
int runlock_writer_acquire(const char* dir, const char* flag, const char* const* names, int nnames, int argc, char** argv);
// Drops it; the lock file goes when a writer made it and nobody else holds it. Runs on fatal errors too.
void runlock_writer_release(void);
// With the lock held (runlock_writer_acquire returned 1): removes dir's temporaries of atomic writes
// of the names ours accepts (atomic_remove_stale) and says so on say ("cleanup: removed ..."; NULL:
// silently). Returns how many.
int runlock_writer_clean(FILE* say, const char* dir, int (*ours)(const char* name, void* ctx), void* ctx);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNLOCK_H
