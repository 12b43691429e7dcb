// Model FLOPs utilization (llmc/base/mfu.c): the peak table picks the right entry for the names CUDA
// reports (whole words: "A10" is not "A100" or "A10G", "H200" is not "GH200"), says 0 for CPUs,
// the emulated backend and GPUs it does not know, and FLOPs per token are 6 N + 6 L C T for full
// training, 4 N_base + 6 N_adapter + 6 L C T for a frozen base, with N the parameter count
// transformers reports for GPT-2 124M (124,439,808).
#include "test.h"
#include "../llmc/base/mfu.h"
#include "../llmc/model/config.h"
#include "../llmc/model/params.h"

static void peak(const char* name, double tflops, const char* model) {
    const char* got = NULL;
    double p = mfu_peak_bf16_flops(name, &got);
    TEST_CHECK(fabs(p - tflops * 1e12) < 1.0 && (model ? got && !strcmp(got, model) : got == NULL),
               "'%s': %.1f TFLOP/s (%s), want %.1f (%s)", name, p / 1e12, got ? got : "none", tflops, model ? model : "none");
}

int main(void) {
    peak("NVIDIA H100 80GB HBM3", 989.4, "H100 SXM");
    peak("NVIDIA H100 PCIe", 756.5, "H100 PCIe");
    peak("NVIDIA H100 NVL", 835.5, "H100 NVL");
    peak("NVIDIA H200", 989.4, "H200 SXM");
    peak("NVIDIA H200 NVL", 835.5, "H200 NVL");
    peak("NVIDIA GH200 480GB", 989.4, "GH200");
    peak("NVIDIA A100-SXM4-80GB", 312.0, "A100");
    peak("NVIDIA A100 80GB PCIe", 312.0, "A100");
    peak("NVIDIA A10", 125.0, "A10");
    peak("NVIDIA L40S", 362.1, "L40S");
    peak("NVIDIA L4", 121.0, "L4");
    peak("NVIDIA GeForce RTX 4090", 165.2, "RTX 4090");
    peak("NVIDIA RTX 6000 Ada Generation", 364.2, "RTX 6000 Ada");
    peak("NVIDIA RTX A6000", 154.8, "RTX A6000");
    peak("NVIDIA B200", 2250.0, "B200");
    // the CUDA backend's name contains the device name
    peak("cuda (GPU 0: NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, 132 SMs; bf16, cuBLASLt)", 989.4, "H100 SXM");
    // unknown: 0
    peak("NVIDIA A10G", 0.0, NULL);
    peak("Tesla V100-SXM2-16GB", 0.0, NULL);
    peak("cuda (emulated on CPU by the test harness)", 0.0, NULL);
    peak("cpu (OpenBLAS, 2 threads)", 0.0, NULL);
    peak("", 0.0, NULL);
    peak(NULL, 0.0, NULL);

    GPT2Config cfg;
    ParamTable pt;
    TEST_CHECK(gpt2_config_from_descriptor(&cfg, "d12") == 0, "d12");
    params_build(&pt, &cfg);
    size_t n = params_count_unpadded(&pt);
    TEST_CHECK(n == 124439808, "GPT-2 124M has %zu parameters, transformers counts 124,439,808", n);
    double full = mfu_flops_per_token(n, 0, 0, 12, 768, 1024);
    TEST_CHECK(full == 6.0 * 124439808 + 6.0 * 12 * 768 * 1024, "full: %.0f FLOPs per token", full);
    double lora = mfu_flops_per_token(n, 1, 294912, 12, 768, 1024);
    TEST_CHECK(lora == 4.0 * 124439808 + 6.0 * 294912 + 6.0 * 12 * 768 * 1024, "LoRA: %.0f FLOPs per token", lora);
    printf("GPT-2 124M at T=1024: %.4g FLOPs per token (full), %.4g (LoRA r=8 on c_attn)\n", full, lora);
    return test_finish("test_mfu");
}
