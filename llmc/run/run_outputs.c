#define _GNU_SOURCE
#include "run/run_outputs.h"
#include "base/check.h"
#include "run/checkpoint.h"
#include "model/convert.h"
#include "model/gguf_io.h"
#include "model/lora.h"
#include "model/model_io.h"
#include "model/peft_io.h"
#include "model/params.h"
#include "ops/ops.h"
#include "text/textgen.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>

// The vocabulary the run samples with (--vocab, next to --model, or the bundled one), when its
// size is the model's.
static void outputs_find_vocab(RunOutputs* o, const GPT2Config* cfg) {
    const TrainFlags* f = &o->c->f;
    char why[LLMC_PATH_MAX + 200];
    const int found = textgen_find_vocab(f->sample.vocab, f->model, o->vocab_buf, sizeof(o->vocab_buf)) == 0;
    o->vocab = NULL;
    if (convert_vocab_fits(found ? o->vocab_buf : NULL, cfg, why, sizeof(why)) == 0) o->vocab = o->vocab_buf;
    else if (o->c->write_outputs) printf("note: the model directories in %s get no tokenizer files: %s\n", f->out_dir, why);
}

// The Hugging Face directory that --model is, or whose weights file it is; 0 if none.
static int outputs_model_hf_dir(const char* model, char* dir, size_t cap) {
    if (convert_is_hf_dir(model)) { snprintf(dir, cap, "%s", model); return 1; }
    const char* slash = strrchr(model, '/');
    const char* name = slash ? slash + 1 : model;
    if (strcmp(name, "model.safetensors") != 0 && strcmp(name, "model.safetensors.index.json") != 0) return 0;
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == model) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - model), model);
    return convert_is_hf_dir(dir);
}

// What the run writes at the entry `name` of --out (a first path component), in words, or NULL:
// a checkpoint of a step in (from, to] (to < 0: none counted), or a final output.
static int outputs_model_hf_dir(const char* model, char* dir, size_t cap);
static const char* outputs_entry_use(const RunConfig* c, const char* name, const char* rel, long from, long to, long* step) {
    const int lora = c->mode == TRAIN_LORA;
    char digits[16];
    *step = -1;
    if (sscanf(name, lora ? "adapter_%8[0-9]" : "model_%8[0-9]", digits) == 1 && strlen(digits) == 8 &&
        !strcmp(name + (lora ? 8 : 6) + 8, lora ? "" : ".bin")) {
        *step = strtol(digits, NULL, 10);
        return to >= 0 && *step > from && *step <= to ? "the checkpoint of step" : NULL;
    }
    if (lora) {
        if (!strcmp(name, "adapter_model.safetensors") || !strcmp(name, "adapter_config.json")) return "the final adapter";
        if (!strcmp(name, "merged") && c->f.merge && (c->save_hf || c->save_llmc)) return "the merged model (--merge)";
        char hf[LLMC_PATH_MAX];
        // OUT/base/ is written when --model is no model directory: its config.json and weights
        if (!strcmp(name, "base") && !outputs_model_hf_dir(c->f.model, hf, sizeof(hf)) &&
            (!strcmp(rel, "base") || !strcmp(rel, "base/model.safetensors") || !strcmp(rel, "base/config.json")))
            return "the base model directory for base_model_name_or_path";
    } else {
        if ((!strcmp(name, "model.safetensors") || !strcmp(name, "config.json")) && c->save_hf) return "the final model (--save-format hf)";
        if (!strcmp(name, "model.bin") && c->save_llmc) return "the final model (--save-format llmc)";
    }
    if (!strcmp(name, "best") && c->f.keep_best) return "the best model (--keep-best)";
    char gguf[64];
    snprintf(gguf, sizeof(gguf), "%s-%s.gguf", lora ? "adapter" : "model", c->f.save_gguf);
    if (c->save_gguf && !strcmp(name, gguf)) return "the GGUF file (--save-gguf)";
    return NULL;
}

// One input flag against --out (resolved, out_real).
static void outputs_check_input(const RunConfig* c, const char* flag, const char* path, const char* out_real, long from, long to) {
    char real[PATH_MAX];
    if (!path || !realpath(path, real)) return; // (a size descriptor, or a missing path: the loader says so)
    const size_t n = strlen(out_real);
    const char* hint = "give --out a directory of its own (the run writes its record, log, checkpoints and final model there), "
                       "or move the input out of it";
    if (!strcmp(real, out_real))
        fatal(hint, "%s %s is the --out directory itself: the run would write its outputs over it", flag, path);
    if (strncmp(real, out_real, n) != 0 || real[n] != '/') return;
    char name[256];
    const char* rel = real + n + 1;
    const char* slash = strchr(rel, '/');
    snprintf(name, sizeof(name), "%.*s", (int)(slash ? (size_t)(slash - rel) : strlen(rel)), rel);
    long step;
    const char* use = outputs_entry_use(c, name, rel, from, to, &step);
    if (!use) return;
    if (step >= 0)
        fatal("move it out of --out, or stop the run before that step (--steps)", "%s %s would be replaced by %s %ld, which this run writes "
              "at '%s/%s' (checkpoints are written at --save-every, at the end, and when a signal stops the run)", flag, path, use, step, c->f.out_dir, name);
    fatal(hint, "%s %s would be replaced: the run writes %s at '%s/%s'", flag, path, use, c->f.out_dir, name);
}

void outputs_check_inputs(const RunConfig* c, long from, long to) {
    char out_real[PATH_MAX];
    if (!c->write_outputs || !realpath(c->f.out_dir, out_real)) return; // (no --out yet: nothing in it can be an input)
    outputs_check_input(c, "--model", c->f.model, out_real, from, to);
    if (c->mode == TRAIN_LORA) outputs_check_input(c, "--adapter", c->f.adapter, out_real, from, to);
}

// OUT/base: the weights of --model as a Hugging Face directory. config.json is written last
// (model_save_hf), so a directory with one is complete and is kept when the run resumes.
static void outputs_write_base(const RunOutputs* o, const char* dir) {
    const TrainFlags* f = &o->c->f;
    HostModel hm;
    convert_load(&hm, f->model, (uint64_t)f->seed);
    convert_write_hf(dir, &hm.pt, hm.params, o->vocab);
    printf("saved: %s/ (the base model %s as a transformers directory: the adapters' base_model_name_or_path)\n", dir, f->model);
    convert_free(&hm);
}

// base_model_name_or_path: the absolute path of a directory transformers loads (PEFT passes it
// to from_pretrained as it is, so a relative one would depend on the loader's working directory).
static void outputs_resolve_base(RunOutputs* o) {
    const TrainFlags* f = &o->c->f;
    char dir[LLMC_PATH_MAX], abs[PATH_MAX];
    const int is_hf = outputs_model_hf_dir(f->model, dir, sizeof(dir));
    if (!is_hf && !o->c->write_outputs) { snprintf(o->base, sizeof(o->base), "%s", f->model); return; } // nothing is saved (--out none)
    if (!is_hf) {
        path_join(dir, sizeof(dir), f->out_dir, "base");
        if (!convert_is_hf_dir(dir)) outputs_write_base(o, dir);
        if (!realpath(f->out_dir, abs)) fatal("check that --out is accessible", "cannot resolve '%s': %s", f->out_dir, strerror(errno));
        path_join(o->base, sizeof(o->base), abs, "base");
        return;
    }
    if (!realpath(dir, abs)) fatal("check the path of --model", "cannot resolve '%s': %s", dir, strerror(errno));
    snprintf(o->base, sizeof(o->base), "%s", abs);
}

// --save-gguf, at start-up rather than after training: a GGUF file carries its tokenizer (the
// model's vocabulary must be found), and a GGUF LoRA adapter only the LoRA matrices (an --adapter
// that trains base tensors, bias= or modules_to_save, goes to GGUF merged).
static void outputs_check_gguf(const RunOutputs* o, const Model* m) {
    const RunConfig* c = o->c;
    if (!c->save_gguf || !c->write_outputs) return;
    if (!o->vocab)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json) with the model's vocabulary, or drop --save-gguf",
              "--save-gguf: a GGUF file carries the tokenizer, and no vocabulary of the model's %d tokens was found", m->gpt.cfg.vocab_size);
    if (m->lora && m->lora->n_extra > 0 && !c->f.merge && !lora_is_bitfit(m->lora)) // (BitFit writes the model as GGUF)
        fatal("add --merge: the merged model is written as GGUF instead",
              "--save-gguf: the adapter trains %d base tensor slice(s) (%s...), which a GGUF LoRA adapter cannot carry",
              m->lora->n_extra, m->lora->extra[0].key);
    if (m->lora && m->lora->spec.dora && !c->f.merge) // (--dora is refused by the flags' check; this is --adapter DIR's)
        fatal("add --merge: the merged model is written as GGUF instead",
              "--save-gguf: the adapter is DoRA (use_dora), and a GGUF LoRA adapter (llama.cpp's) has no magnitude vector");
}

void outputs_init(RunOutputs* o, const RunConfig* c, Model* m, int rank) {
    memset(o, 0, sizeof(*o));
    o->c = c;
    o->rank = rank;
    o->ckpt_step = -1;
    if (rank != 0) return; // rank 0 writes every output (other hosts need not see --out)
    outputs_find_vocab(o, &m->gpt.cfg);
    outputs_check_gguf(o, m);
    if (!m->lora || lora_is_bitfit(m->lora)) return; // (BitFit writes no adapter: no base to name)
    outputs_resolve_base(o);
    const size_t len = strlen(o->base);
    if (len >= sizeof(m->lora->base_name))
        fatal("use a shorter --out or --model path", "the base model's path '%s' is too long for adapter_config.json", o->base);
    memcpy(m->lora->base_name, o->base, len + 1);
}

#define INIT_ADAPTER_DIR "init_adapter"

const char* outputs_init_path(char* out, size_t cap, const RunConfig* c) {
    char dir[LLMC_PATH_MAX];
    path_join(dir, sizeof(dir), c->f.out_dir, INIT_ADAPTER_DIR);
    path_join(out, cap, dir, "adapter_model.safetensors");
    return out;
}

void outputs_start(const RunOutputs* o, const Model* m) {
    if (!o->c->write_outputs || o->rank != 0 || !m->lora || !m->lora->init0) return;
    char dir[LLMC_PATH_MAX];
    path_join(dir, sizeof(dir), o->c->f.out_dir, INIT_ADAPTER_DIR);
    peft_save_adapter_init(m->lora, dir);
    printf("saved: %s/ (the initial %s adapter: the residual base of a resume, PEFT's path_initial_model_for_weight_conversion)\n", dir,
           LORA_INIT_NAMES[m->lora->spec.init]);
}

// A PEFT directory: the adapter (final: as peft_save_adapter_final writes it) and the tokenizer files.
static void outputs_write_adapter(const RunOutputs* o, const Model* m, const char* dir, int final) {
    if (final) peft_save_adapter_final(m->lora, dir);
    else peft_save_adapter(m->lora, dir);
    if (o->vocab) convert_write_tokenizer(dir, o->vocab, &m->gpt.cfg);
}

const float* outputs_params_in_place(const Model* m) {
    const GPT2* g = &m->gpt;
    if (ops_caps().floatx != OPS_F32 || m->nf4 || m->base16 || !g->p[0]) return NULL;
    const float* base = (const float*)g->p[0];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if ((const float*)g->p[i] != base + g->pt.t[i].offset) return NULL;
        for (int l = 0; g->pt.t[i].per_layer && l < g->cfg.num_layers; l++)
            if ((const float*)gpt2_param_slice(g, (ParamId)i, l) != base + params_layer_offset(&g->pt, (ParamId)i, l)) return NULL;
    }
    return base;
}

// The model in fp32 on the host for the writers: in place, or a copy (*copy: to free).
static const float* outputs_params(const Model* m, float** copy) {
    const float* in_place = outputs_params_in_place(m);
    *copy = NULL;
    if (in_place) return in_place;
    *copy = (float*)mallocCheck(m->gpt.pt.total * sizeof(float));
    gpt2_get_params((GPT2*)&m->gpt, *copy);
    return *copy;
}

void outputs_checkpoint(const RunOutputs* o, const Model* m, long step) {
    const char* out = o->c->f.out_dir;
    char path[LLMC_PATH_MAX];
    if (!o->c->write_outputs || o->rank != 0) return;
    if (m->lora) {
        // the checkpoint's adapter tensors are adapter_model.safetensors of its PEFT directory;
        // BitFit's are the trained biases alone (r = 0 is no PEFT adapter: no adapter_config.json)
        ckpt_path(path, sizeof(path), out, "adapter", step, 0);
        if (lora_is_bitfit(m->lora)) {
            char dir[LLMC_PATH_MAX];
            snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
            mkdir_p(dir);
            peft_save_tensors(m->lora, path);
            return;
        }
        char* slash = strrchr(path, '/');
        *slash = '\0';
        outputs_write_adapter(o, m, path, 0);
        return;
    }
    float* copy;
    const float* params = outputs_params(m, &copy);
    ckpt_path(path, sizeof(path), out, "model", step, 0);
    model_save_llmc(path, &m->gpt.pt, params, 0);
    free(copy);
}

// dir/NAME-TYPE.gguf of --save-gguf TYPE.
static void outputs_gguf_path(const RunOutputs* o, char* path, size_t cap, const char* dir, const char* name) {
    char file[64];
    snprintf(file, sizeof(file), "%s-%s.gguf", name, o->c->f.save_gguf);
    path_join(path, cap, dir, file);
}

// --save-gguf: the adapter as a GGUF LoRA adapter (train_lora, when it carries nothing else:
// outputs_check_gguf) when host is NULL, else the model whose weights host holds.
static void outputs_save_gguf(const RunOutputs* o, const Model* m, const char* dir, const float* host) {
    const RunConfig* c = o->c;
    char path[LLMC_PATH_MAX];
    GgmlType type;
    if (!c->save_gguf || gguf_parse_type(c->f.save_gguf, &type) != 0) return;
    char base[256], desc[sizeof(base) + 100];
    gguf_model_name(c->f.model, base, sizeof(base));
    const int bitfit = m->lora && lora_is_bitfit(m->lora);
    snprintf(desc, sizeof(desc), "%s from %s, written by llmc-ft %s", bitfit ? "GPT-2 with its biases trained (BitFit)"
             : m->lora ? (host ? "GPT-2 with a LoRA adapter merged in, trained" : "LoRA adapter trained") : "GPT-2 fine-tuned", base, runconfig_program(c->mode));
    GgufProvenance prov = {NULL, base, bitfit ? "full" : m->lora ? (host ? "lora-merged" : "lora") : "full", desc};
    if (!host) {
        outputs_gguf_path(o, path, sizeof(path), dir, "adapter");
        gguf_save_lora(path, m->lora, type, &prov);
        printf("saved: %s (GGUF LoRA adapter for llama.cpp --lora; the base as GGUF: convert --to gguf --model %s)\n", path, c->f.model);
        return;
    }
    outputs_gguf_path(o, path, sizeof(path), dir, "model");
    gguf_save_gpt2(path, &m->gpt.pt, host, type, o->vocab, &prov);
    printf("saved: %s (GGUF %s, with its tokenizer: llama.cpp, Ollama)\n", path, c->f.save_gguf);
}

// The merged model's weights (malloc'd) from the adapter just written to adapter_dir. A merge is an
// output, done in fp32 from the fp32 base read again from --model, by convert's code (convert_load,
// convert_merge_adapter: the same bytes as `convert --model BASE --adapter DIR`), not from the
// weights the run computed with (the frozen base is held in bf16 with --dtype bf16 and on a GPU).
// It holds, besides the model, the base's fp32 weights (with what their loader reads them through:
// a transposed HF Conv1D weight, a GGUF row) and the adapter read back (lora_create's parameters
// and gradients, the host copies of peft_load_adapter and lora_merge). QLoRA: the adapter goes
// into dequant(quant(W)) of the NF4 base, the matrices it was trained against (as PEFT merges into
// a 4-bit model), from the model's own weights.
static float* outputs_merged(const RunOutputs* o, const Model* m, const char* adapter_dir) {
    const ParamTable* pt = &m->gpt.pt;
    if (m->nf4) {
        float* host = (float*)mallocCheck(pt->total * sizeof(float));
        gpt2_get_params((GPT2*)&m->gpt, host); // (dequant(quant(W)) for the quantized weights)
        lora_merge(m->lora, pt, host);         // W += scaling * B A
        printf("merged: adapter merged into dequant(quant(W)) of the NF4 base (the weights it was trained against)\n");
        return host;
    }
    HostModel hm;
    convert_load(&hm, o->c->f.model, (uint64_t)o->c->f.seed);
    if (hm.pt.total != pt->total) fatal("this is a bug in llmc", "--model %s read again for the merge has another shape", o->c->f.model);
    convert_merge_adapter(&hm, adapter_dir);
    printf("merged: adapter merged in fp32 into the base read again from %s (as convert --model BASE --adapter %s)\n", o->c->f.model, adapter_dir);
    return hm.params; // (the only allocation of a HostModel)
}

// BitFit's model (malloc'd): the fp32 base read again from --model (as outputs_merged does: the
// frozen weights the run computed with may be bf16 copies) with the trained biases of the run in
// place; with an NF4 base, the model's own weights (dequant(quant(W)) for the quantized ones).
static float* outputs_bitfit(const RunOutputs* o, const Model* m) {
    const ParamTable* pt = &m->gpt.pt;
    float* host;
    if (m->nf4) {
        host = (float*)mallocCheck(pt->total * sizeof(float));
        gpt2_get_params((GPT2*)&m->gpt, host);
        return host;
    }
    HostModel hm;
    convert_load(&hm, o->c->f.model, (uint64_t)o->c->f.seed);
    if (hm.pt.total != pt->total) fatal("this is a bug in llmc", "--model %s read again for the output has another shape", o->c->f.model);
    host = hm.params; // (the only allocation of a HostModel)
    for (int i = 0; i < m->lora->n_extra; i++) {
        const LoraExtra* e = &m->lora->extra[i];
        ops_download_f32(host + params_layer_offset(pt, e->id, e->layer < 0 ? 0 : e->layer), e->p, params_layer_numel(pt, e->id));
    }
    printf("bitfit: the trained biases in the fp32 base read again from %s\n", o->c->f.model);
    return host;
}

// model.bin in dir (--out) as a second name of the checkpoint's model file (linked under a
// temporary name, then renamed over it: atomic like every write); 0 when there is no such
// checkpoint or the file system refuses the link (the caller writes the file).
static int outputs_link_llmc(const RunOutputs* o, const char* dir, const char* path) {
    if (o->ckpt_step < 0 || strcmp(dir, o->c->f.out_dir) != 0) return 0;
    char src[LLMC_PATH_MAX], tmp[LLMC_PATH_MAX + 32];
    ckpt_path(src, sizeof(src), dir, "model", o->ckpt_step, 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    if (link(src, tmp) != 0) return 0;
    if (rename(tmp, path) != 0) {
        const int err = errno;
        unlink(tmp);
        fatal("check the permissions of --out", "cannot rename '%s' to '%s': %s", tmp, path, strerror(err));
    }
    printf("saved: %s (llm.c; the checkpoint's %s under a second name, a hard link: no disk of its own)\n", path, strrchr(src, '/') + 1);
    return 1;
}

void outputs_save(const RunOutputs* o, const Model* m, const char* dir) {
    const RunConfig* c = o->c;
    char mdir[LLMC_PATH_MAX], path[LLMC_PATH_MAX];
    const char* adapter_dir = dir;
    if (!c->write_outputs || o->rank != 0) return;
    const int bitfit = m->lora && lora_is_bitfit(m->lora); // (the output is the model, as train_gpt2's)
    if (m->lora && !bitfit) {
        outputs_write_adapter(o, m, dir, 1);
        printf("saved: %s/adapter_model.safetensors + adapter_config.json (PEFT; base %s)%s%s\n", dir, o->base,
               o->vocab ? " + tokenizer files" : "", m->lora->init0 ? " (converted to a rank-2r LoRA of the original base)" : "");
        if (m->lora->n_extra == 0) outputs_save_gguf(o, m, dir, NULL);
        if (!c->f.merge || !(c->save_hf || c->save_llmc || c->save_gguf)) return;
        path_join(mdir, sizeof(mdir), dir, "merged");
        dir = mdir;
        if (!c->save_hf) mkdir_p(dir);
    } else if (!(c->save_hf || c->save_llmc || c->save_gguf)) return;
    path_join(path, sizeof(path), dir, "model.bin");
    const int linked = !m->lora && c->save_llmc && outputs_link_llmc(o, dir, path);
    if (linked && !c->save_hf && !c->save_gguf) return;
    const ParamTable* pt = &m->gpt.pt;
    float* copy = NULL;
    const float* host = bitfit ? (copy = outputs_bitfit(o, m)) : m->lora ? (copy = outputs_merged(o, m, adapter_dir)) : outputs_params(m, &copy);
    if (c->save_hf) {
        convert_write_hf(dir, pt, host, o->vocab);
        printf("saved: %s/ config.json + model.safetensors + generation_config.json%s (transformers)\n", dir,
               o->vocab ? " + tokenizer files" : "");
    }
    if (c->save_llmc && !linked) {
        model_save_llmc(path, pt, host, 0);
        printf("saved: %s (llm.c)\n", path);
    }
    outputs_save_gguf(o, m, dir, host);
    free(copy);
}
