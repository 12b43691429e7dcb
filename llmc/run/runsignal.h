// The signals that end a training run: SIGINT (Ctrl-C), SIGTERM (kill, schedulers, mpirun passing
// on a Ctrl-C), SIGHUP (the terminal or ssh session closed) and SIGPIPE (the console is a pipe
// whose reader went away, `train_gpt2 ... | head`). While the run starts up (the record, the
// model, the data: any of it may block, on a FIFO or a slow network path) nothing has been
// written, so a signal ends the process at once, as by default, with a line saying so, after the
// start-up clean-up (runsignal_set_startup_cleanup: the lock and the --out directory a new run
// made). From the first write on a signal is only noted: the loop finishes its step, writes a
// checkpoint and the process then ends by the same signal, so the shell sees 128 + the signal
// (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 141 SIGPIPE) and a script stops, as it does for any
// program the signal ended. (Under mpirun the signal goes to mpirun, which ends the ranks with
// SIGTERM; its own exit status is its own: Open MPI's is 1.)
#ifndef LLMC_RUNSIGNAL_H
#define LLMC_RUNSIGNAL_H

#ifdef __cplusplus
extern "C" {
#endif

void runsignal_startup(void);   // a signal ends the process now (call it on the thread of the loop)
// From now on a signal is noted (runsignal_pending). console_may_stall (ranks under mpirun): the
// console becomes non-blocking when one comes, since mpirun stops reading it on Ctrl-C.
void runsignal_deferred(int console_may_stall);
int runsignal_pending(void);    // the signal noted since runsignal_deferred, or 0
// What the start-up handler runs before the process ends: async-signal-safe calls only (unlink,
// rmdir). NULL: nothing.
void runsignal_set_startup_cleanup(void (*fn)(void));
// "SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE" or "a signal".
const char* runsignal_name(int sig);
// End the process by sig (after the run's clean-up). Returns 128 + sig, the status to exit with,
// only where the signal cannot end it.
int runsignal_exit(int sig);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNSIGNAL_H
