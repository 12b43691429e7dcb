// NF4 4-bit quantization of frozen base weights for QLoRA, bit-compatible with bitsandbytes
// (the checkpoint layout: docs/FORMATS.md, "bitsandbytes 4-bit"). Quantizing the same fp32
// weights gives the same packed bytes, absmax and double-quantization constants that
// bitsandbytes' CPU path (bitsandbytes 0.50.2 + PyTorch CPU) produces, and dequantization gives
// the same fp32 values to the last bit. Layout:
//   - blocks of NF4_BLOCK (64) consecutive weights of the flattened [out, in] matrix, each with
//     an fp32 absmax; weight w maps to the nearest of the 16 NF4 code values of w/absmax;
//   - two codes per byte, element 2j in the high nibble, 2j+1 in the low nibble (an odd count
//     pads the last low nibble with code 7, the code of 0.0, as bitsandbytes does);
//   - double quantization ("compress_statistics"): offset = mean of the absmax values, the
//     absmax - offset values quantized to 8 bits in blocks of NF4_DQ_BLOCK (256) with the signed
//     dynamic 8-bit code map and an fp32 scale per block: ~4.127 bits per parameter in all.
// bitsandbytes' CUDA kernels quantize the same way (same fp32 midpoints, same tie-breaking)
// except in corners: an all-zero block gets code 0 (-1.0 * 0) instead of 7, the last partial
// block is scaled by a reciprocal instead of a division, the 8-bit absmax codes come from a
// nearest-value search instead of the CPU's 65536-entry table, and torch.mean on the GPU sums in
// another order. Any of those files loads and dequantizes here exactly as bitsandbytes does.
#ifndef LLMC_NF4_H
#define LLMC_NF4_H

#include <stddef.h>
#include <stdint.h>

#include "base/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NF4_BLOCK 64      // weights per absmax block (bitsandbytes blocksize)
#define NF4_DQ_BLOCK 256  // absmax values per nested scale (bitsandbytes nested_blocksize)
#define NF4_MAX_DIMS 4

typedef struct {
    int64_t n;                   // number of weights
    int ndim;
    int64_t shape[NF4_MAX_DIMS]; // logical shape, [out, in] for matmul weights
    int64_t n_blocks;            // ceil(n / 64)
    uint8_t* packed;             // ceil(n / 2) bytes of codes
    float code4[16];             // the 4-bit code map (quant_map; the NF4 table)
    int double_quant;            // 0: absmax holds the fp32 scales; 1: nested form below
    float* absmax;               // [n_blocks] fp32 scales (double_quant == 0), else NULL
    uint8_t* absmax_q;           // [n_blocks] 8-bit codes of absmax - offset (double_quant == 1)
    int64_t n_dq_blocks;         // ceil(n_blocks / 256)
    float* absmax_scale;         // [n_dq_blocks] nested absmax (fp32 scale per 256 codes)
    float offset;                // nested offset (mean of the fp32 absmax values)
    float code8[256];            // nested quant map (bitsandbytes' signed dynamic map)
    char hf_quant_state[512];    // JSON written by nf4_to_hf_state (kept here until the save)
} NF4Tensor;

// The 16 NF4 code values (index order = code order, ascending).
extern const float nf4_code_values[16];

// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), rebuilt from
// its defining formula with the same fp32 arithmetic PyTorch uses (256 sorted values).
void nf4_dynamic_map(float code[256]);

// The fp32 mean that PyTorch's CPU tensor.mean() returns for a contiguous 1-D fp32 tensor on
// x86-64, where bitsandbytes takes the double-quantization offset from: a cascade sum over 8-lane
// vectors, split into per-thread partial sums when n >= 32768 and PyTorch runs torch_threads
// threads (torch.get_num_threads()), then sum / n. Exposed for tests.
float nf4_torch_mean(const float* x, int64_t n, int torch_threads);

// Quantize n = prod(shape) fp32 weights (row-major) into t (allocates; free with nf4_free).
// double_quant selects bitsandbytes' compress_statistics=True form. The result is what bitsandbytes
// computes with PyTorch on one thread; nf4_quantize_ex reproduces a PyTorch running torch_threads
// threads instead (that only changes the offset, and only of tensors with >= 32768 blocks, i.e.
// >= 2M weights, and there by at most a few ulp: the dequantized weights differ by about that).
void nf4_quantize(NF4Tensor* t, const float* w, int ndim, const int64_t* shape, int double_quant);
void nf4_quantize_ex(NF4Tensor* t, const float* w, int ndim, const int64_t* shape, int double_quant,
                     int torch_threads);
void nf4_free(NF4Tensor* t);

// The fp32 absmax of every block (decoding the nested form if double-quantized): out[n_blocks].
void nf4_absmax_f32(const NF4Tensor* t, float* out);

// Dequantize all n weights to fp32.
void nf4_dequantize(const NF4Tensor* t, float* out);
// Dequantize weights [begin, end) into out[0 .. end-begin): for dequantizing one layer's slice
// into a shared scratch buffer.
void nf4_dequantize_range(const NF4Tensor* t, int64_t begin, int64_t end, float* out);
// Rows [row_begin, row_end) of the tensor viewed as [shape[0], n/shape[0]].
void nf4_dequantize_rows(const NF4Tensor* t, int64_t row_begin, int64_t row_end, float* out);

// Read one bitsandbytes 4-bit weight from a safetensors file written by transformers'
// save_pretrained of a load_in_4bit model (QuantState.as_dict(packed=True)): `key` holds the packed
// codes ([(n+1)/2, 1] bytes), then <key>.absmax, <key>.quant_map, <key>.nested_absmax,
// <key>.nested_quant_map (the last two only with double quantization) and
// <key>.quant_state.bitsandbytes__nf4, a uint8 tensor holding the JSON text of quant_type,
// blocksize, dtype, shape and (nested) nested_blocksize, nested_dtype, nested_offset.
// Fatal, naming the file and key, for a missing key, another quant type or block size, or sizes
// that do not agree with the shape. The stored code maps are used as stored.
void nf4_from_hf_state(NF4Tensor* t, StFile* f, const char* key);

// Add t to a safetensors writer under `key` exactly as transformers + bitsandbytes save it (the
// keys above, same dtypes and shapes, the quant_state JSON formatted like Python's json.dumps);
// dtype is the name of the weights' original dtype ("float32", "bfloat16", "float16"), which
// bitsandbytes dequantizes to. t's arrays must stay valid until st_writer_save.
void nf4_to_hf_state(NF4Tensor* t, StWriter* w, const char* key, const char* dtype);

// The packed image of a tensor: every array of it in one buffer, each section starting at a
// multiple of 16 bytes, in this order: the codes ((n + 1) / 2 bytes); then either absmax (fp32
// [n_blocks]) or, double-quantized, absmax_q ([n_blocks] bytes), absmax_scale (fp32 [n_dq_blocks])
// and code8 (fp32 [256]); then code4 (fp32 [16]). What the CUDA backend uploads (one allocation)
// and what ZeRO 3 shards and all-gathers as bytes (llmc/dist/fsdp.h). Offsets of the sections (0 for
// an absent one) and the image's bytes:
typedef struct { size_t packed, absmax, absmax_q, absmax_scale, code8, code4, bytes; } NF4Image;
void nf4_image_layout(const NF4Tensor* t, NF4Image* img);
// The image's bytes for a tensor of n weights, from n alone (a plan's, llmc/plan/memplan.h).
size_t nf4_image_bytes_for(int64_t n, int double_quant);
// Write t's image into out (host memory, nf4_image_layout bytes).
void nf4_image_pack(const NF4Tensor* t, uint8_t* out);
// view = meta with its arrays pointing into the image at `image` (host memory here; nothing is
// read, so the CPU backend's handles use it on any image). The code maps stay meta's copies.
void nf4_image_view(NF4Tensor* view, const NF4Tensor* meta, const uint8_t* image);
// Free t's arrays and keep its description (shape, code maps, offset): its data lives in an
// image elsewhere. nf4_image_unpack gives it arrays of its own again, copied from a host image.
void nf4_strip(NF4Tensor* t);
void nf4_image_unpack(NF4Tensor* t, const uint8_t* image);

// Bytes the quantized tensor occupies: packed codes + absmax storage (+ nested scales and offset;
// the shared 16- and 256-entry code maps are not counted). nf4_bytes_for computes it from n alone.
size_t nf4_bytes_for(int64_t n, int double_quant);
size_t nf4_bytes(const NF4Tensor* t);
double nf4_bits_per_param(int64_t n, int double_quant);

#ifdef __cplusplus
}
#endif
#endif // LLMC_NF4_H
