// Tools: `flashattn bench`: forward and backward TFLOP/s of the library over a grid.
// FLOPs per DESIGN.md; GPU times with CUDA events, CPU with a steady clock; medians after a
// warm-up. --json writes the results format of ANCHORS.md.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "attention.h"
#include "commands.h"
#include "common.h"
#include "gpu.h"

namespace cli {

namespace {

struct Row {
  std::string op, dtype, kernel;
  int64_t hdim, seqlen, batch, heads;
  bool causal;
  double ms, tflops;
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool write_json(const std::string& path, const std::string& device_name, double matmul_tflops,
                const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "{\"gpu\": %s, \"date\": %s, \"commit\": %s", json_string(device_name).c_str(),
               json_string(today()).c_str(), json_string(git_commit()).c_str());
  if (matmul_tflops > 0) std::fprintf(f, ", \"matmul_bf16_tflops\": %.1f", matmul_tflops);
  std::fprintf(f, ",\n \"rows\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "%s\n  {\"op\": \"%s\", \"dtype\": \"%s\", \"hdim\": %lld, \"causal\": %s, \"seqlen\": %lld, "
                 "\"batch\": %lld, \"heads\": %lld, \"impl\": \"flashattn\", \"kernel\": %s, \"ms\": %.4f, "
                 "\"tflops\": %.3f}",
                 i ? "," : "", r.op.c_str(), r.dtype.c_str(), (long long)r.hdim, r.causal ? "true" : "false",
                 (long long)r.seqlen, (long long)r.batch, (long long)r.heads, json_string(r.kernel).c_str(), r.ms,
                 r.tflops);
  }
  std::fprintf(f, "\n]}\n");
  return std::fclose(f) == 0;
}

// One line of the table, printed as soon as it is measured.
void print_row(const std::vector<std::string>& cells) {
  static const int width[] = {-5, 4, 6, 6, 5, 5, -13, 10, 11, 10, 11};
  std::string line = " ";
  for (size_t i = 0; i < cells.size(); ++i) {
    const int w = i < sizeof width / sizeof width[0] ? width[i] : 0;
    line += fmt(" %*s", w, cells[i].c_str());
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Median milliseconds of fn over `repeats` runs after one warm-up; < 0 if fn failed.
double time_ms(int device, const std::function<bool()>& fn, int repeats) {
  if (device != FA_DEVICE_CPU) return gpu::time_ms(fn, 2, repeats);
  if (!fn()) return -1;
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = now_seconds();
    if (!fn()) return -1;
    ms.push_back((now_seconds() - t0) * 1e3);
  }
  return median(ms);
}

}  // namespace

int bench_main(int argc, char** argv) {
  Args args("bench",
            "Forward and backward TFLOP/s of the FlashAttention path over a grid of shapes.\n"
            "FLOPs: fwd = 4*B*H*Sq*Sk*D, halved for causal; bwd = 2.5 x fwd.\n"
            "GPU default: the peers' grid (bf16, 16k tokens: batch = 16384/seqlen, heads = 2048/hdim,\n"
            "hdim 64,128,256, seqlen 512..16k, causal and not). CPU default: batch 1, heads 8,\n"
            "seqlen 1024,4096, hdim 64,128, causal and not, fp32 and bf16.",
            {{"device", "DEV", "cpu or cuda (default: cuda when a device is present)"},
             {"seqlens", "LIST", "sequence lengths, e.g. 512,1k,2k"},
             {"hdims", "LIST", "head dims, e.g. 64,128"},
             {"causal", "WHICH", "yes, no or both (default both)"},
             {"dtype", "LIST", "storage dtypes, e.g. bf16,fp16"},
             {"batch", "N", "batch size (GPU default: tokens / seqlen)"},
             {"heads", "N", "heads (GPU default: 2048 / hdim)"},
             {"tokens", "N", "GPU grid: tokens per batch (default 16k)"},
             {"repeats", "N", "timed runs per shape; the median is shown (default: cpu 3, cuda 20)"},
             {"threads", "N", "CPU threads (default: all cores)"},
             {"json", "FILE", "write the results (ANCHORS.md format) to FILE"}},
            argc, argv);
  const int gpus = fa_cuda_device_count();
  const std::string dev = args.str("device", gpus > 0 ? "cuda" : "cpu");
  if (dev != "cpu" && dev != "cuda") args.usage_error("--device must be cpu or cuda, not '" + dev + "'");
  const bool on_gpu = dev == "cuda";
  if (on_gpu && gpus == 0) {
    std::fprintf(stderr, "flashattn bench: no CUDA device\n");
    return kExitFail;
  }
  const int device = on_gpu ? 0 : FA_DEVICE_CPU;
  const std::vector<int64_t> seqlens =
      args.int_list("seqlens", on_gpu ? std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384}
                                      : std::vector<int64_t>{1024, 4096});
  const std::vector<int64_t> hdims =
      args.int_list("hdims", on_gpu ? std::vector<int64_t>{64, 128, 256} : std::vector<int64_t>{64, 128});
  const std::string causal = args.str("causal", "both");
  if (causal != "yes" && causal != "no" && causal != "both")
    args.usage_error("--causal must be yes, no or both, not '" + causal + "'");
  std::vector<fa_dtype> dtypes;
  for (const std::string& s : args.str_list("dtype", on_gpu ? std::vector<std::string>{"bf16"}
                                                            : std::vector<std::string>{"fp32", "bf16"})) {
    fa_dtype t;
    if (!parse_dtype(s, &t)) args.usage_error("unknown dtype '" + s + "'");
    dtypes.push_back(t);
  }
  const int64_t tokens = args.integer("tokens", 16384);
  const int repeats = int(args.integer("repeats", on_gpu ? 20 : 3));
  const int threads = int(args.integer("threads", 0));
  if (repeats < 1 || tokens < 1) args.usage_error("--repeats and --tokens must be positive");

  std::string device_name = cpu_model();
  double matmul = -1;
  if (on_gpu) {
    fa_device_info info{};
    info.struct_size = sizeof info;
    if (fa_get_device_info(0, &info) == FA_STATUS_OK) device_name = info.name;
    matmul = gpu::matmul_bf16_tflops();
    std::printf("device: %s; cuBLAS bf16 8192^3 matmul: %.1f TFLOP/s\n", device_name.c_str(), matmul);
  } else {
    std::printf("device: %s, %d cores (%s)\n", device_name.c_str(), threads ? threads : cpu_cores(),
                fa_cpu_features());
  }

  print_row({"dtype", "hdim", "causal", "seqlen", "batch", "heads", "kernel", "fwd ms", "fwd TFLOP/s",
             "bwd ms", "bwd TFLOP/s"});
  std::vector<Row> rows;
  int failures = 0;
  for (fa_dtype t : dtypes)
    for (int64_t d : hdims)
      for (int c = 0; c < 2; ++c) {
        if ((c == 0 && causal == "yes") || (c == 1 && causal == "no")) continue;
        for (int64_t s : seqlens) {
          Shape sh;
          sh.seqlen_q = sh.seqlen_k = s;
          sh.head_dim = sh.head_dim_v = d;
          sh.causal = c == 1;
          sh.batch = args.integer("batch", on_gpu ? std::max<int64_t>(1, tokens / s) : 1);
          sh.heads_q = sh.heads_kv = args.integer("heads", on_gpu ? std::max<int64_t>(1, 2048 / d) : 8);
          std::vector<std::string> cells = {dtype_name(t), fmt("%lld", (long long)d), sh.causal ? "yes" : "no",
                                            human_len(s), fmt("%lld", (long long)sh.batch),
                                            fmt("%lld", (long long)sh.heads_q)};
          Attention a(sh, t, device);
          a.threads = threads;
          if (!a.ok() || !a.alloc_outputs()) {
            cells.push_back("skipped: " + a.error());
            print_row(cells);
            continue;
          }
          a.randomize(seed_from_time());
          const fa_fwd_params fp = a.fwd_params(FA_ALGORITHM_FLASH);
          const fa_bwd_params bp = a.bwd_params(FA_ALGORITHM_FLASH);
          const char* kernel = fa_fwd_kernel_name(&fp);
          if (!kernel) {
            cells.push_back(std::string("skipped: ") + fa_last_error());
            print_row(cells);
            continue;
          }
          cells.push_back(kernel);
          const double flops = sh.fwd_flops();
          const double f_ms = time_ms(device, [&] { return fa_fwd(&fp, nullptr) == FA_STATUS_OK; }, repeats);
          const double b_ms = f_ms < 0 ? -1 : time_ms(device, [&] { return fa_bwd(&bp, nullptr) == FA_STATUS_OK; }, repeats);
          const char* bwd_kernel = fa_bwd_kernel_name(&bp);
          for (auto [op, ms, fl, kname] :
               {std::tuple<const char*, double, double, const char*>{"fwd", f_ms, flops, kernel},
                std::tuple<const char*, double, double, const char*>{"bwd", b_ms, 2.5 * flops,
                                                                     bwd_kernel ? bwd_kernel : "unknown"}}) {
            if (ms < 0) {
              cells.push_back("failed");
              cells.push_back("");
              continue;
            }
            const double tf = fl / (ms * 1e-3) / 1e12;
            cells.push_back(fmt("%.3f", ms));
            cells.push_back(fmt(tf >= 100 ? "%.1f" : tf >= 1 ? "%.2f" : "%.3f", tf));
            rows.push_back({op, dtype_name(t), kname, d, s, sh.batch, sh.heads_q, sh.causal, ms, tf});
          }
          if (f_ms < 0 || b_ms < 0) {
            ++failures;
            std::fprintf(stderr, "flashattn bench: %s\n", fa_last_error());
          }
          print_row(cells);
        }
      }
  if (args.has("json")) {
    const std::string path = args.str("json", "");
    if (!write_json(path, device_name, on_gpu ? matmul : -1, rows)) {
      std::fprintf(stderr, "flashattn bench: cannot write %s\n", path.c_str());
      return kExitFail;
    }
    std::printf("wrote %s (%zu rows)\n", path.c_str(), rows.size());
  }
  return failures ? kExitFail : 0;
}

}  // namespace cli
