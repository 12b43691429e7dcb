// The `convert` program (convert.cu): flags, then load -> merge -> write (llmc/model/convert.h).
#ifndef LLMC_CONVERT_CLI_H
#define LLMC_CONVERT_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

// Returns the exit code.
int convert_main(int argc, char** argv);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CONVERT_CLI_H
