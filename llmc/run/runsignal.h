// SIGINT / SIGTERM in a training run. While it starts up (the record, the model, the data: any of
// it may block, on a FIFO or a slow network path) nothing has been written, so a signal ends the
// process at once, as by default, with a line saying so. From the first write on a signal is
// only noted: the loop finishes its step, writes a checkpoint and the process then ends by the
// same signal, so the shell sees 130 (SIGINT) or 143 (SIGTERM) and a script stops, as it does
// for any program the signal ended.
#ifndef LLMC_RUNSIGNAL_H
#define LLMC_RUNSIGNAL_H

#ifdef __cplusplus
extern "C" {
#endif

void runsignal_startup(void);   // a signal ends the process now
void runsignal_deferred(void);  // a signal is noted (runsignal_pending)
int runsignal_pending(void);    // the signal noted since runsignal_deferred, or 0
// End the process by sig (after the run's clean-up). Returns 128 + sig, the status to exit with,
// only where the signal cannot end it.
int runsignal_exit(int sig);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUNSIGNAL_H
