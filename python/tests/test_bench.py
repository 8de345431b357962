"""The benchmark driver (bench/bench_attn.py) on a tiny CPU grid: it must run every op and mode
the GPU proof run asks of it and write the results file in the ANCHORS format, since CI has no
GPU to find a broken driver before a device run does."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench_script(name):
    """bench/<name>.py as a module (the bench scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench_module():
    return _bench_script("bench_attn")


def test_bench_driver_cpu_smoke(tmp_path, capsys):
    out = tmp_path / "rows.json"
    _bench_module().main([
        "--device", "cpu", "--hdims", "32", "--seqlens", "64", "--causal", "0,1", "--tokens", "128",
        "--width", "64", "--heads-kv", "1", "--ops", "fwd,bwd,step", "--deterministic", "--json", str(out),
    ])
    data = json.loads(out.read_text())
    for key in ("date", "commit", "torch", "gpu", "rows"):
        assert key in data
    rows = data["rows"]
    ours = [r for r in rows if r["impl"] == "flashattn"]
    assert sorted((r["op"], r["causal"]) for r in ours) == sorted(
        (op, c) for op in ("fwd", "bwd", "step") for c in (False, True))
    for r in rows:
        assert r["tflops"] > 0 and r["ms"] > 0
        assert r["batch"] == 2 and r["heads"] == 2 and r["heads_kv"] == 1
    for r in ours:
        assert r["kernel"] in ("cpu_flash", "cpu_flash+cpu_flash")
    assert any(r["impl"] == "flashattn_det" and r.get("deterministic") for r in rows)
    assert "| step |" in capsys.readouterr().out


def test_host_bound_rows_marked():
    """A GPU row whose host time reaches 0.8 of its timed figure is flagged in the row itself and
    gets a note (which the driver writes into the results file); the others are left alone."""
    rows = [dict(impl="flashattn", op="step", hdim=256, seqlen=512, causal=True, ms=0.612, host_us=500.1),
            dict(impl="sdpa_cudnn", op="step", hdim=256, seqlen=512, causal=True, ms=0.601, host_us=206.3),
            dict(impl="flashattn", op="fwd", hdim=64, seqlen=512, causal=False, ms=0.182)]
    notes = _bench_module().mark_host_bound(rows)
    assert [r.get("host_bound", False) for r in rows] == [True, False, False]
    assert notes == ["flashattn step hdim=256 S=512 causal=True: host-bound (500 us of host time a call, 612 us timed)"]


def test_host_time_ignores_a_pause(monkeypatch):
    """The host time of a call is the smallest batch mean: a pause in one batch (a garbage
    collection) does not make the cell read host-bound."""
    mod = _bench_module()
    batches = []

    def fake_host_us(fn, n, warmup):
        batches.append(n)
        return [900.0, 40.0, 45.0][len(batches) - 1]

    monkeypatch.setattr(mod.host_cost, "host_us", fake_host_us)
    assert mod.host_us(lambda: None, gpu_ms=0.25) == 40.0
    assert batches == [16, 16, 16]  # 50 calls' budget (50 ms of GPU time) over three batches
    batches.clear()
    monkeypatch.setattr(mod.host_cost, "host_us", lambda fn, n, warmup: batches.append(n) or 10.0)
    mod.host_us(lambda: None, gpu_ms=20.0)
    assert batches == [5, 5, 5]  # a long call: at least five a batch


def test_rounds_rotate_the_order(monkeypatch):
    """Each op is timed for every implementation in every round, each round (and cell, through
    `first`) starting one implementation further on; a peer whose timer raises is dropped with a
    note, and the other implementations keep all their rounds."""
    mod = _bench_module()
    order = []

    def fake_time(fn, device):
        return fn()

    def timer(name, op):
        def fn():
            order.append((op, name))
            if name == "bad" and op == "bwd":
                raise RuntimeError("no such shape")
            return 1.0
        return fn

    monkeypatch.setattr(mod, "time_ms", fake_time)
    names = ["flashattn", "peer", "bad"]
    timers = {n: {op: timer(n, op) for op in ("fwd", "bwd")} for n in names}
    notes = []
    samples = mod.time_rounds(timers, ["fwd", "bwd"], 3, "cpu", first=1, notes=notes, what="cell")
    fwd = [n for op, n in order if op == "fwd"]
    assert fwd == ["peer", "bad", "flashattn", "bad", "flashattn", "peer", "flashattn", "peer", "bad"]
    assert samples["flashattn"] == {"fwd": [1.0] * 3, "bwd": [1.0] * 3}
    assert samples["peer"]["bwd"] == [1.0] * 3
    assert "bad" not in samples
    assert notes == ["bad cell: RuntimeError: no such shape"]


def test_rounds_kept_in_rows(tmp_path):
    out = tmp_path / "rows.json"
    _bench_module().main(["--device", "cpu", "--hdims", "32", "--seqlens", "64", "--causal", "1", "--tokens", "64",
                          "--width", "32", "--ops", "fwd", "--rounds", "2", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(len(r["ms_rounds"]) == 2 and min(r["ms_rounds"]) <= r["ms"] <= max(r["ms_rounds"])
                        for r in rows)


def test_kernel_times_names_the_three_kernels():
    # bench/kernel_times.py sorts profiler kernel names into the backward's three kernels; the
    # names are the library's (demangled) kernel names, so a rename there shows up here.
    mod = _bench_script("kernel_times")
    assert mod.kernel_of("void fa::cuda::(anonymous namespace)::bwd_pre_kernel<true, false>(...)") == "pre"
    assert mod.kernel_of("void fa::cuda::(anonymous namespace)::bwd_post_kernel<true, (DqAccumLayout)0>(...)") == "post"
    assert mod.kernel_of("void fa::cuda::kernel_entry<fa::cuda::sm90::BwdKernel<128, 128, 64>>(...)") == "main"
    assert mod.kernel_of("void at::native::vectorized_elementwise_kernel<4>(...)") is None
    src = (ROOT / "src" / "cuda" / "sm80" / "bwd_pre_post.cu").read_text()
    assert "bwd_pre_kernel" in src and "bwd_post_kernel" in src


def test_ab_names_the_bytes_of_each_build(tmp_path):
    # bench/ab.py records each build's sha256, so that a results file says which library ran.
    mod = _bench_script("ab")
    a, b = tmp_path / "a.so", tmp_path / "b.so"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    d = mod.library_digests([["base", str(a)], ["new", str(b)], ["same", str(a)]])
    assert d["base"] == d["same"] != d["new"]
    assert d["base"] == "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed"


def test_varlen_cells(tmp_path):
    """--varlen packs each cell's tokens into sequences of varied length: the rows say so, count
    the sequences as the batch and take their FLOPs from the sum of the squared lengths."""
    mod = _bench_module()
    lengths = mod.varlen_lengths(1000, 64, seed=7)
    assert sum(lengths) == 1000 and all(32 <= n <= 96 for n in lengths[:-1]) and 1 <= lengths[-1] <= 96
    assert len(set(lengths)) > 1 and lengths == mod.varlen_lengths(1000, 64, seed=7)
    out = tmp_path / "rows.json"
    mod.main(["--device", "cpu", "--hdims", "32", "--seqlens", "64", "--causal", "0,1", "--tokens", "256",
              "--width", "64", "--ops", "fwd,bwd", "--varlen", "--deterministic", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    expect = mod.varlen_lengths(256, 64, seed=64 * 1009 + 32)
    assert {(r["op"], r["causal"], r["impl"]) for r in rows} == {
        (op, c, impl) for op in ("fwd", "bwd") for c in (False, True) for impl in ("flashattn", "flashattn_det")}
    for r in rows:
        assert r["varlen"] and r["batch"] == len(expect) and r["max_seqlen"] == max(expect)
        assert r["kernel"] == "cpu_flash"
        f = mod.flops(r["op"], 1, 2, 0, 32, r["causal"], sq_sum=sum(n * n for n in expect))
        assert abs(r["tflops"] - f / (r["ms"] * 1e-3) / 1e12) <= 1e-4 * r["tflops"] + 1e-5


def test_window_pairs_counts_visible_keys():
    """A window's FLOPs count its visible (query, key) pairs: checked against a dense mask."""
    mod = _bench_module()
    for lengths in ([7], [5, 9, 9, 1]):
        for causal in (False, True):
            for window in ((2, 1), (0, 0), (-1, 3), (4, -1), (-1, -1), (20, 20)):
                expect = 0
                for n in lengths:
                    i = [[qi, ki] for qi in range(n) for ki in range(n)]
                    right = 0 if causal else window[1]
                    expect += sum(1 for qi, ki in i if (window[0] < 0 or ki >= qi - window[0])
                                  and (right < 0 or ki <= qi + right))
                assert mod.window_pairs(lengths, causal, window) == expect, (lengths, causal, window)


def test_softcap_and_window_cells(tmp_path):
    """--softcap and --window run every cell with them: the rows say so and take a window's FLOPs
    from its visible pairs; the CPU peer (SDPA) cannot run them and is left out with a note; ab.py
    keeps such cells apart from plain ones."""
    mod = _bench_module()
    out = tmp_path / "rows.json"
    mod.main(["--device", "cpu", "--hdims", "32", "--seqlens", "64", "--causal", "0,1", "--tokens", "128",
              "--width", "64", "--ops", "fwd", "--softcap", "20", "--window", "8,4", "--json", str(out)])
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert {(r["causal"], r["impl"]) for r in rows} == {(False, "flashattn"), (True, "flashattn")}
    assert any("sdpa_cpu" in n and "softcap or window_size" in n for n in res["notes"])
    for r in rows:
        assert r["softcap"] == 20.0 and r["window"] == [8, 4] and r["kernel"] == "cpu_flash"
        f = mod.flops("fwd", 2, 2, 64, 32, r["causal"], pairs=mod.window_pairs([64, 64], r["causal"], (8, 4)))
        assert abs(r["tflops"] - f / (r["ms"] * 1e-3) / 1e12) <= 1e-4 * r["tflops"] + 1e-5
    ab = _bench_script("ab")
    plain = dict(rows[0])
    del plain["softcap"], plain["window"]
    assert ab.cell_of(rows[0]) != ab.cell_of(plain)
    assert len({ab.cell_of(r) for r in rows}) == 2  # hashable with the window's list; causal apart
