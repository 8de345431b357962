// Tools: `flashattn demo`: naive attention and FlashAttention side by side.
// Forward + backward of one problem on the best device present: time, peak extra memory
// (measured, never computed), max error against the reference; then a sweep over sequence
// lengths showing naive memory growing ~S² and ours ~S, optionally drawn as a PNG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention.h"
#include "chart.h"
#include "child.h"
#include "commands.h"
#include "common.h"
#include "gpu.h"

namespace cli {

namespace {

// One path (naive or flash) on one problem.
struct Measured {
  bool ran = false;
  std::string note;  // why it did not run
  double fwd_s = 0, bwd_s = 0;
  double fwd_peak_bytes = 0, peak_bytes = 0;  // through the forward; through fwd + bwd
  Outputs out;  // when asked for
  std::string kernel;
};

std::string seconds(double s) {
  if (s >= 1) return fmt("%.2f s", s);
  if (s >= 1e-3) return fmt("%.1f ms", s * 1e3);
  return fmt("%.0f us", s * 1e6);
}

// ---- CPU: each path in a forked child, its resident high-water mark measured -------------

// Starts the CPU backend's threads (their stacks then belong to the baseline, not the path).
void warm_up_cpu(fa_dtype t, int threads) {
  Shape s;
  s.seqlen_q = s.seqlen_k = 64;
  s.head_dim = s.head_dim_v = 32;
  Attention w(s, t, FA_DEVICE_CPU);
  w.threads = threads;
  w.set_inputs(random_inputs(s, t, 1));
  if (!w.alloc_outputs()) return;
  for (fa_algorithm a : {FA_ALGORITHM_REFERENCE, FA_ALGORITHM_FLASH}) {
    w.fwd(a);
    w.bwd(a);
  }
}

Measured measure_cpu(Attention& a, fa_algorithm alg, bool want_outputs) {
  const Shape& s = a.shape();
  const size_t sizes[] = {s.numel_o(), s.numel_lse(), s.numel_q(), s.numel_k(), s.numel_v()};
  size_t floats = 0;
  for (size_t n : sizes) floats += n;
  Child child(want_outputs ? floats * sizeof(float) : 0);
  Measured m;
  const bool ran = child.run([&](ChildReport& r, void* shared) {
    Attention& mine = a;  // in the child: its own copy of the parent's object
    warm_up_cpu(a.dtype(), a.threads);
    RssMeter meter;
    if (!meter.begin()) return r.fail("cannot reset the memory high-water mark (/proc/self/clear_refs)");
    if (!mine.alloc_outputs()) return r.fail(mine.error());
    const fa_fwd_params probe = mine.fwd_params(alg);
    if (const char* k = fa_fwd_kernel_name(&probe)) std::snprintf(r.name, sizeof r.name, "%s", k);
    const double t0 = now_seconds();
    if (mine.fwd(alg) != FA_STATUS_OK) return r.fail(std::string("fwd: ") + fa_last_error());
    const double t1 = now_seconds();
    r.values[3] = meter.peak_extra_bytes();
    if (mine.bwd(alg) != FA_STATUS_OK) return r.fail(std::string("bwd: ") + fa_last_error());
    const double t2 = now_seconds();
    r.values[0] = t1 - t0;
    r.values[1] = t2 - t1;
    r.values[2] = meter.peak_extra_bytes();
    if (want_outputs) {
      const Outputs o = mine.outputs();
      float* dst = static_cast<float*>(shared);
      for (const std::vector<float>* v : {&o.o, &o.lse, &o.dq, &o.dk, &o.dv}) {
        std::copy(v->begin(), v->end(), dst);
        dst += v->size();
      }
    }
    r.ok = 1;
  });
  if (!ran) {
    m.note = child.report().error;
    return m;
  }
  m.ran = true;
  m.kernel = child.report().name;
  m.fwd_s = child.report().values[0];
  m.bwd_s = child.report().values[1];
  m.peak_bytes = child.report().values[2];
  m.fwd_peak_bytes = child.report().values[3];
  if (want_outputs) {
    const float* src = static_cast<const float*>(child.shared());
    std::vector<float>* dst[] = {&m.out.o, &m.out.lse, &m.out.dq, &m.out.dk, &m.out.dv};
    for (int i = 0; i < 5; ++i) {
      dst[i]->assign(src, src + sizes[i]);
      src += sizes[i];
    }
  }
  return m;
}

// ---- GPU: device memory measured with cudaMemGetInfo around every allocation and call ----

Measured measure_gpu_flash(Attention& a, bool want_outputs) {
  Measured m;
  // A first run loads the kernels, so their code is not counted as the path's memory.
  const bool allocated_once = a.alloc_outputs();
  const fa_fwd_params probe = a.fwd_params(FA_ALGORITHM_FLASH);
  if (const char* k = fa_fwd_kernel_name(&probe)) m.kernel = k;
  if (!allocated_once || a.fwd(FA_ALGORITHM_FLASH) != FA_STATUS_OK || a.bwd(FA_ALGORITHM_FLASH) != FA_STATUS_OK) {
    m.note = a.ok() ? fa_last_error() : a.error();
    return m;
  }
  a.free_outputs();
  gpu::MemWatch watch;
  watch.begin();
  bool allocated = a.alloc_forward_outputs();
  watch.sample();
  const bool fwd_ran = allocated && a.fwd(FA_ALGORITHM_FLASH) == FA_STATUS_OK;
  watch.sample();
  m.fwd_peak_bytes = watch.peak();
  allocated = allocated && a.alloc_backward_outputs();
  watch.sample();
  const bool ran = fwd_ran && allocated && a.bwd(FA_ALGORITHM_FLASH) == FA_STATUS_OK;
  m.peak_bytes = watch.end();
  if (!ran) {
    m.note = allocated ? fa_last_error() : a.error();
    return m;
  }
  if (want_outputs) m.out = a.outputs();
  const fa_fwd_params fp = a.fwd_params(FA_ALGORITHM_FLASH);
  const fa_bwd_params bp = a.bwd_params(FA_ALGORITHM_FLASH);
  m.fwd_s = gpu::time_ms([&] { return fa_fwd(&fp, nullptr) == FA_STATUS_OK; }, 1, 5) * 1e-3;
  m.bwd_s = gpu::time_ms([&] { return fa_bwd(&bp, nullptr) == FA_STATUS_OK; }, 1, 5) * 1e-3;
  a.free_outputs();
  m.ran = m.fwd_s > 0 && m.bwd_s > 0;
  if (!m.ran) m.note = fa_last_error();
  return m;
}

Measured measure_gpu_naive(const Attention& a, bool want_outputs) {
  const Shape& s = a.shape();
  gpu::NaiveProblem p;
  p.dtype = a.dtype();
  p.batch = s.batch;
  p.seqlen = s.seqlen_q;
  p.heads = s.heads_q;
  p.head_dim = s.head_dim;
  p.causal = s.causal;
  p.q = a.q(), p.k = a.k(), p.v = a.v(), p.dout = a.dout();
  Measured m;
  if (want_outputs) {
    m.out.o.resize(s.numel_o());
    m.out.dq.resize(s.numel_q());
    m.out.dk.resize(s.numel_k());
    m.out.dv.resize(s.numel_v());
  }
  const gpu::NaiveResult r = gpu::naive_attention(p, want_outputs ? m.out.o.data() : nullptr,
                                                  want_outputs ? m.out.dq.data() : nullptr,
                                                  want_outputs ? m.out.dk.data() : nullptr,
                                                  want_outputs ? m.out.dv.data() : nullptr);
  m.ran = r.ok;
  m.note = r.out_of_memory ? "out of memory" : r.error;
  m.fwd_s = r.fwd_ms * 1e-3;
  m.bwd_s = r.bwd_ms * 1e-3;
  m.peak_bytes = r.peak_bytes;
  m.fwd_peak_bytes = r.fwd_peak_bytes;
  m.kernel = "cuBLAS, fp32 scores";
  return m;
}

// ---- the demo ----------------------------------------------------------------------------

struct Setup {
  bool gpu = false;
  fa_dtype dtype = FA_DTYPE_FP32;
  Shape shape;
  int threads = 0;
  uint64_t seed = 0;
  int64_t sweep_heads = 1;
  double budget_s = 20;  // the CPU sweep skips a path whose estimated time exceeds this
};

Measured run_path(const Setup& st, Attention& a, bool naive, bool want_outputs) {
  if (st.gpu) return naive ? measure_gpu_naive(a, want_outputs) : measure_gpu_flash(a, want_outputs);
  return measure_cpu(a, naive ? FA_ALGORITHM_REFERENCE : FA_ALGORITHM_FLASH, want_outputs);
}

std::string sweep_dims(const Shape& s) {
  return fmt("B=%lld H=%lld D=%lld", (long long)s.batch, (long long)s.heads_q, (long long)s.head_dim);
}

std::string err_cell(const std::vector<float>& impl, const std::vector<float>& ref) {
  const double e = max_abs_diff(impl, ref), m = max_abs(ref);
  return fmt("%.1e (%.0e rel.)", e, m > 0 ? e / m : 0.0);
}

std::string device_label(const Setup& st) {
  if (!st.gpu) return fmt("%s, %d cores", cpu_model().c_str(), st.threads ? st.threads : cpu_cores());
  fa_device_info info{};
  info.struct_size = sizeof info;
  return fa_get_device_info(0, &info) == FA_STATUS_OK ? std::string(info.name) : std::string("CUDA device 0");
}

int run_demo(const Setup& st, const std::vector<int64_t>& sweep, const std::string& plot) {
  const Shape& s = st.shape;
  const std::string where = device_label(st);
  std::printf("flashattn demo on %s: %s %s%s, forward + backward\n\n", where.c_str(), s.dims().c_str(),
              dtype_name(st.dtype), s.causal ? ", causal" : "");

  Attention a(s, st.dtype, st.gpu ? 0 : FA_DEVICE_CPU);
  if (!a.ok()) {
    std::fprintf(stderr, "flashattn demo: %s\n", a.error().c_str());
    return kExitFail;
  }
  a.threads = st.threads;
  a.randomize(st.seed);
  const Measured naive = run_path(st, a, true, true);
  const Measured flash = run_path(st, a, false, true);

  // Rows: path, time fwd, time bwd, peak memory through fwd, through fwd + bwd, errors.
  Table t({"path", "fwd time", "bwd time", "fwd peak", "fwd+bwd peak", "max |err| O", "max |err| dQ,dK,dV"});
  auto row = [&](const std::string& name, const Measured& m, std::string err_o, std::string err_g) {
    if (!m.ran) return t.add({name, "-", "-", "-", "-", "not run: " + m.note});
    t.add({name, seconds(m.fwd_s), seconds(m.bwd_s), mib(m.fwd_peak_bytes) + " MiB", mib(m.peak_bytes) + " MiB",
           err_o, err_g});
  };
  row(st.gpu ? "naive (cuBLAS, fp32 S and P)" : "naive (library reference)", naive, "reference", "reference");
  std::string err_o = "-", err_g = "-";
  if (flash.ran && naive.ran) {
    double e = 0, m = 0;
    for (auto [i, r] : {std::pair{&flash.out.dq, &naive.out.dq}, std::pair{&flash.out.dk, &naive.out.dk},
                        std::pair{&flash.out.dv, &naive.out.dv}})
      e = std::max(e, max_abs_diff(*i, *r)), m = std::max(m, max_abs(*r));
    err_o = err_cell(flash.out.o, naive.out.o);
    err_g = fmt("%.1e (%.0e rel.)", e, m > 0 ? e / m : 0.0);
  }
  row("flashattn (" + (flash.kernel.empty() ? std::string("?") : flash.kernel) + ")", flash, err_o, err_g);
  t.print();
  std::printf("\n  peak: extra memory beyond the inputs q, k, v, dO (outputs included), %s\n",
              st.gpu ? "measured with cudaMemGetInfo around every allocation and call"
                     : "measured as VmHWM - VmRSS of a forked child");
  if (st.gpu) std::printf("  naive backward: dP materialised too, all GEMMs by cuBLAS; times after a warm-up\n");
  if (naive.ran && flash.ran)
    std::printf("  flashattn: %.1fx less memory, %.1fx the speed of the naive path\n",
                naive.peak_bytes / std::max(flash.peak_bytes, 1.0),
                (naive.fwd_s + naive.bwd_s) / std::max(flash.fwd_s + flash.bwd_s, 1e-12));
  if (!flash.ran) return kExitFail;
  if (sweep.empty()) return 0;

  // The sweep: the same problem at other lengths (and, on the CPU, fewer heads so the slow
  // reference reaches longer sequences). A path whose time, estimated ~S² from its previous
  // point, exceeds the budget is skipped, and so is naive memory that could not fit.
  Shape base = s;
  base.heads_q = base.heads_kv = st.sweep_heads;
  std::printf("\nsweep over the sequence length (%s %s%s), peak extra memory in MiB, time of fwd + bwd:\n\n",
              sweep_dims(base).c_str(), dtype_name(st.dtype), s.causal ? ", causal" : "");
  Table sw({"seqlen", "naive fwd", "naive fwd+bwd", "flash fwd", "flash fwd+bwd", "naive/flash", "naive time",
            "flash time"});
  const std::string naive_label = st.gpu ? "NAIVE (CUBLAS)" : "NAIVE (REFERENCE)";
  Series lines[2] = {{naive_label + " FWD+BWD", 0xD62728, {}}, {"FLASHATTN FWD+BWD", 0x1F77B4, {}}};
  Series fwd_lines[2] = {{naive_label + " FWD", 0xE8888A, {}, true}, {"FLASHATTN FWD", 0x7FB2DA, {}, true}};
  const double avail = st.gpu ? 0 : mem_available_bytes();
  double last_len[2] = {0, 0}, last_s[2] = {0, 0}, last_bytes[2] = {0, 0};
  for (int64_t len : sweep) {
    Measured pair[2];  // naive, flash
    if (len == s.seqlen_q && s.seqlen_q == s.seqlen_k && base.heads_q == s.heads_q) {
      pair[0] = naive, pair[1] = flash;
    } else {
      Shape sh = base;
      sh.seqlen_q = sh.seqlen_k = len;
      Attention b(sh, st.dtype, st.gpu ? 0 : FA_DEVICE_CPU);
      b.threads = st.threads;
      if (b.ok()) b.randomize(st.seed + uint64_t(len));
      for (int i = 0; i < 2; ++i) {
        const double grow = last_len[i] > 0 ? double(len) * len / (last_len[i] * last_len[i]) : 0;
        if (!b.ok()) {
          pair[i].note = b.error();
        } else if (!st.gpu && last_s[i] * grow > st.budget_s) {
          pair[i].note = fmt("skipped: ~%.0f s", last_s[i] * grow);
        } else if (!st.gpu && i == 0 && last_bytes[i] * grow > 0.7 * avail) {
          pair[i].note = fmt("skipped: ~%s MiB", mib(last_bytes[i] * grow).c_str());
        } else {
          pair[i] = run_path(st, b, i == 0, false);
        }
      }
    }
    for (int i = 0; i < 2; ++i)
      if (pair[i].ran) {
        last_len[i] = double(len), last_s[i] = pair[i].fwd_s + pair[i].bwd_s, last_bytes[i] = pair[i].peak_bytes;
        lines[i].points.emplace_back(double(len), std::max(pair[i].peak_bytes / (1024.0 * 1024.0), 0.01));
        fwd_lines[i].points.emplace_back(double(len), std::max(pair[i].fwd_peak_bytes / (1024.0 * 1024.0), 0.01));
      } else if (pair[i].note.empty()) {
        pair[i].note = "failed";
      }
    auto cell = [](const Measured& m, int what) {  // 0: fwd peak, 1: fwd + bwd peak, 2: time
      if (!m.ran) return what == 1 ? m.note : std::string("-");
      return what == 0 ? mib(m.fwd_peak_bytes) : what == 1 ? mib(m.peak_bytes) : seconds(m.fwd_s + m.bwd_s);
    };
    sw.add({human_len(len), cell(pair[0], 0), cell(pair[0], 1), cell(pair[1], 0), cell(pair[1], 1),
            pair[0].ran && pair[1].ran ? fmt("%.0fx", pair[0].peak_bytes / std::max(pair[1].peak_bytes, 1.0)) : "-",
            cell(pair[0], 2), cell(pair[1], 2)});
  }
  sw.print();

  if (!plot.empty()) {
    ChartText text;
    text.title = "PEAK EXTRA MEMORY OF ATTENTION";
    text.subtitle = (st.gpu ? where : "CPU " + cpu_model()) + ": " + sweep_dims(base) + " " +
                    dtype_name(st.dtype) + (s.causal ? " CAUSAL" : "");
    text.x_label = "SEQUENCE LENGTH";
    text.y_label = "MIB BEYOND THE INPUTS";
    if (!write_loglog_chart(plot, text, {lines[0], fwd_lines[0], lines[1], fwd_lines[1]})) {
      std::fprintf(stderr, "flashattn demo: cannot write the chart to %s\n", plot.c_str());
      return kExitFail;
    }
    std::printf("\nwrote %s\n", plot.c_str());
  }
  return 0;
}

}  // namespace

int demo_main(int argc, char** argv) {
  Args args("demo",
            "Forward + backward of one problem on the best device present, the naive path and the\n"
            "FlashAttention path side by side: time, peak extra memory (measured), max error\n"
            "against the reference. Then a sweep over sequence lengths: naive memory grows ~S^2,\n"
            "ours ~S. CPU: naive is the library's reference (fp64, materialises S and P).\n"
            "GPU: naive is cuBLAS GEMMs with fp32 scores and a softmax kernel.",
            {{"device", "DEV", "cpu or cuda (default: cuda when a device is present)"},
             {"batch", "N", "batch size (default 1)"},
             {"heads", "N", "heads (default: cpu 8, cuda 16)"},
             {"seqlen", "N", "sequence length (default: cpu 4096, cuda 16k)"},
             {"hdim", "N", "head dim (default: cpu 64, cuda 128)"},
             {"dtype", "T", "fp32, bf16 or fp16 (default: cpu fp32, cuda bf16)"},
             {"causal", nullptr, "causal mask"},
             {"sweep", "LIST", "sequence lengths of the sweep (default: cpu 512..16k, cuda 1k..64k)"},
             {"no-sweep", nullptr, "only the one problem"},
             {"sweep-heads", "N", "heads in the sweep (default: cpu 1, cuda as --heads)"},
             {"budget", "SECONDS", "CPU sweep: skip a path whose estimated time exceeds this (default 20)"},
             {"plot", "FILE", "draw the sweep (memory vs length, log-log) as a PNG"},
             {"seed", "S", "random seed (default: from the clock)"},
             {"threads", "N", "CPU threads (default: all cores)"}},
            argc, argv);
  Setup st;
  const int gpus = fa_cuda_device_count();
  const std::string dev = args.str("device", gpus > 0 ? "cuda" : "cpu");
  if (dev != "cpu" && dev != "cuda") args.usage_error("--device must be cpu or cuda, not '" + dev + "'");
  st.gpu = dev == "cuda";
  if (st.gpu && gpus == 0) {
    std::fprintf(stderr, "flashattn demo: no CUDA device\n");
    return kExitFail;
  }
  if (!parse_dtype(args.str("dtype", st.gpu ? "bf16" : "fp32"), &st.dtype))
    args.usage_error("unknown dtype '" + args.str("dtype", "") + "'");
  if (st.gpu && st.dtype == FA_DTYPE_FP32) args.usage_error("the GPU path takes bf16 or fp16");
  Shape& s = st.shape;
  s.batch = args.integer("batch", 1);
  s.heads_q = s.heads_kv = args.integer("heads", st.gpu ? 16 : 8);
  s.seqlen_q = s.seqlen_k = args.integer("seqlen", st.gpu ? 16384 : 4096);
  s.head_dim = s.head_dim_v = args.integer("hdim", st.gpu ? 128 : 64);
  s.causal = args.has("causal");
  if (s.batch < 1 || s.heads_q < 1 || s.seqlen_q < 1 || s.head_dim < 1)
    args.usage_error("--batch, --heads, --seqlen and --hdim must be positive");
  st.threads = int(args.integer("threads", 0));
  st.seed = uint64_t(args.integer("seed", int64_t(seed_from_time())));
  st.budget_s = args.real("budget", 20);
  st.sweep_heads = args.integer("sweep-heads", st.gpu ? s.heads_q : 1);
  if (st.sweep_heads < 1) args.usage_error("--sweep-heads must be positive");
  std::vector<int64_t> sweep = args.int_list(
      "sweep", st.gpu ? std::vector<int64_t>{1024, 2048, 4096, 8192, 16384, 32768, 65536}
                      : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384});
  if (args.has("no-sweep")) sweep.clear();
  if (args.has("plot") && sweep.empty()) args.usage_error("--plot needs the sweep");
  return run_demo(st, sweep, args.str("plot", ""));
}

}  // namespace cli
