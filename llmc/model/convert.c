#include "model/convert.h"
#include "base/check.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/model_io.h"
#include "model/peft_io.h"
#include "model/qlora.h"
#include "text/tokenizer.h"
#include "text/vocab.h"
#include <string.h>

void convert_load(HostModel* hm, const char* path, uint64_t seed) {
    memset(hm, 0, sizeof(*hm));
    if (gpt2_config_from_descriptor(&hm->cfg, path) == 0) {
        params_build(&hm->pt, &hm->cfg);
        hm->params = (float*)mallocCheck(hm->pt.total * sizeof(float));
        model_init_gpt2(&hm->pt, hm->params, seed);
        snprintf(hm->source, sizeof(hm->source), "%s (GPT-2 init, seed %llu)", path, (unsigned long long)seed);
    } else if (qlora_is_hf4bit(path)) {
        // the NF4 weights dequantized into their (zero) fp32 slots: the values the tool computes with
        Nf4Base* b = qlora_load_hf4bit(path, &hm->cfg, &hm->pt, &hm->params);
        for (int id = 0; id < NUM_PARAM_TENSORS; id++)
            if (qlora_is_quantized((ParamId)id)) qlora_dequant_host(b, &hm->pt, (ParamId)id, hm->params + hm->pt.t[id].offset);
        qlora_free(b);
        snprintf(hm->source, sizeof(hm->source), "%s (bitsandbytes 4-bit, dequantized)", path);
    } else {
        model_load(path, &hm->cfg, &hm->pt, &hm->params);
        snprintf(hm->source, sizeof(hm->source), "%s", path);
    }
}

// The base tensors the adapter trained (biases with bias="all"/"lora_only", ln_f with
// modules_to_save) replace the base's, then every adapter is merged: W += scaling B A.
void convert_merge_adapter(HostModel* hm, const char* adapter) {
    LoraModel* lm = peft_load_adapter(adapter, &hm->cfg);
    if (lora_init_rewrites_base(lm->spec.init)) { // a PiSSA adapter: its values are those of the residual base
        lora_init_from_base(lm, &hm->pt, hm->params);
        lora_init_residual(lm, &hm->pt, hm->params);
    }
    size_t off = 0;
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const size_t n = params_layer_numel(&hm->pt, e->id);
        float* dst = hm->params + params_layer_offset(&hm->pt, e->id, e->layer < 0 ? 0 : e->layer);
        memcpy(dst, lm->extra_host + off, n * sizeof(float));
        off += n;
    }
    lora_merge(lm, &hm->pt, hm->params);
    lora_free(lm);
    size_t len = strlen(hm->source);
    snprintf(hm->source + len, sizeof(hm->source) - len, " + adapter %s (merged)", adapter);
}

void convert_free(HostModel* hm) {
    free(hm->params);
    memset(hm, 0, sizeof(*hm));
}

int convert_is_hf_dir(const char* path) {
    char p[LLMC_PATH_MAX];
    if (!dir_exists(path)) return 0;
    path_join(p, sizeof(p), path, "config.json");
    if (!file_exists(p)) return 0;
    path_join(p, sizeof(p), path, "model.safetensors");
    if (file_exists(p)) return 1;
    path_join(p, sizeof(p), path, "model.safetensors.index.json");
    return file_exists(p);
}

int convert_vocab_fits(const char* vocab_path, const GPT2Config* cfg, char* why, size_t why_cap) {
    VocabFiles vf;
    if (!vocab_path) { snprintf(why, why_cap, "no vocabulary found (pass --vocab)"); return -1; }
    if (vocab_files(vocab_path, &vf) != 0) { snprintf(why, why_cap, "'%s' holds no vocabulary", vocab_path); return -1; }
    Tokenizer tk;
    tok_load(&tk, vocab_path); // fatal on a broken vocabulary: better now than in the user's transformers
    const int V = tk.vocab_size;
    tok_free(&tk);
    if (V == cfg->vocab_size) return 0;
    snprintf(why, why_cap, "the vocabulary '%s' has %d tokens, the model %d", vocab_path, V, cfg->vocab_size);
    return -1;
}

void convert_write_tokenizer(const char* dir, const char* vocab_path, const GPT2Config* cfg) {
    char why[LLMC_PATH_MAX + 200];
    if (model_save_hf_tokenizer(dir, vocab_path, cfg, why, sizeof(why)) != 0)
        fatal("this is a bug in llmc: check the vocabulary with convert_vocab_fits first", "%s", why);
}

void convert_write_hf(const char* dir, const ParamTable* pt, const float* params, const char* vocab_path) {
    if (vocab_path) convert_write_tokenizer(dir, vocab_path, &pt->cfg); // first: config.json comes last
    model_save_hf(dir, pt, params);
}

void convert_write_safetensors(const char* path, const ParamTable* pt, const float* params) {
    const GPT2Config* c = &pt->cfg;
    if (c->channels != 64 * c->num_heads)
        fatal("write a transformers directory instead (--out DIR): its config.json keeps n_head",
              "--out '%s': a lone .safetensors file has no config, and its loaders take n_head = C / 64 = %d; this model has %d heads",
              path, c->channels / 64, c->num_heads);
    model_save_safetensors(path, pt, params);
}
