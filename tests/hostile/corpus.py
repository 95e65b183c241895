"""The hostile corpus as data: every submission, the problem it is audited on, the check that
must fail it (None for an honest control) and the devices where that can be judged.

Every submission is a file under tests/hostile whose function `candidate` is the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

ANY = ("cpu", "cuda")
GPU = ("cuda",)
CPU = ("cpu",)
"""Plain-PyTorch controls: on a GPU the kernels check rightly calls them library fallbacks."""


@dataclass(frozen=True)
class Submission:
    file: str
    """Relative to tests/hostile, e.g. "hacks/cache_by_id.py"."""
    problem: str
    """The stem of a file in tests/hostile/problems: "linear" or "linear_into"."""
    expect: str | None
    """The check that must report a failure; None for a control, which must pass every check."""
    devices: tuple[str, ...]
    """Where it can be judged: a subset of ("cpu", "cuda")."""
    what: str


def _hack(name: str, expect: str, what: str, devices: tuple[str, ...] = ANY) -> Submission:
    return Submission(f"hacks/{name}.py", "linear", expect, devices, what)


def _control(name: str, what: str, devices: tuple[str, ...] = CPU) -> Submission:
    return Submission(f"controls/{name}.py", "linear", None, devices, what)


CORPUS: tuple[Submission, ...] = (
    # replay: state kept between calls
    _hack("cache_by_data_ptr", "replay", "result cached by the inputs' data pointers"),
    _hack("cache_by_id", "replay", "result cached by the inputs' id()"),
    _hack("cache_by_version", "replay", "result cached by data pointer, _version and shape"),
    _hack("cache_by_shape", "replay", "result cached by shape alone"),
    _hack("weight_cache_by_id", "replay", "packed weight cached by id(w): updates ignored"),
    _hack("previous_result", "replay", "returns the previous call's result"),
    _hack("zeros_after_warmup", "replay", "right for 8 calls, then zeros"),
    # unwritten outputs
    _hack("empty_output", "unwritten", "returns torch.empty, never written"),
    Submission(
        "hacks/untouched_destination.py",
        "linear_into",
        "unwritten",
        ANY,
        "destination y never written (the name is rebound)",
    ),
    # what is returned
    _hack("lazy_subclass", "output-objects", "tensor subclass that computes when first used"),
    _hack("attribute_override", "output-objects", "right values, out.allclose planted"),
    _hack("expanded_output", "output-objects", "one row expanded with stride 0"),
    _hack("float64_output", "output-objects", "float64 returned for a float32 output"),
    _hack("cpu_output", "output-objects", "CPU tensor returned for CUDA inputs", GPU),
    # work left running after the return
    _hack("late_thread", "deferred-work", "a thread fills the output 50 ms later"),
    _hack("side_stream_sleep", "deferred-work", "side stream behind _sleep, never joined", GPU),
    # process-wide state
    _hack("patched_perf_counter", "global-state", "time.perf_counter replaced at import"),
    _hack("patched_synchronize", "global-state", "torch.cuda.synchronize replaced at import"),
    _hack("patched_allclose", "global-state", "torch.allclose and assert_close replaced"),
    _hack("patched_tensor_eq", "global-state", "torch.Tensor.__eq__ replaced"),
    _hack("tf32_flag", "global-state", "allow_tf32 switched on inside the call"),
    _hack("matmul_precision", "global-state", 'set_float32_matmul_precision("medium")'),
    _hack("reseeded_rng", "global-state", "torch.manual_seed and randperm inside the call"),
    _hack("deterministic_toggle", "global-state", "use_deterministic_algorithms switched on"),
    # behaving differently while timed
    _hack("timed_stack", "timing", "zeros when a caller's name mentions time or bench"),
    _hack("rapid_calls", "timing", "zeros when called back to back"),
    # behaving differently when no harness watches
    _hack("watched_harness", "unwatched", "right only while kernelaudit is loaded"),
    # the benchmark's shape only
    _hack("workload_shape", "specialisation", "exact at the workload shape only"),
    # precision and truth
    _hack("bfloat16_compute", "numerics", "computes in bfloat16"),
    _hack("tf32_rounding", "numerics", "inputs truncated to TF32 bits by hand"),
    _hack("patched_oracle", "numerics", "patches the reference and oracle in its own process"),
    _hack("frame_snooping", "numerics", "looks for the expected output in callers' frames"),
    _hack("rotating_reduction", "determinism", "reduction order changes from call to call"),
    # memory
    _hack("write_past_end", "bounds", "writes one element past its output"),
    _hack("zeroed_input", "mutation", "zeroes its input x"),
    _hack("input_view", "aliasing", "returns a view of its input x"),
    _hack("static_buffer", "aliasing", "returns one static buffer every call"),
    _hack("untyped_storage", "stale-memory", "output from raw UntypedStorage, unwritten", GPU),
    # the process itself
    _hack("sigkill", "execution", "kills its own process with SIGKILL"),
    _hack("endless_loop", "execution", "never returns"),
    _hack("host_memory", "execution", "allocates host memory past the limit"),
    _hack("gpu_memory", "execution", "takes and holds all free GPU memory", GPU),
    # not a kernel at all
    _hack("library_matmul", "kernels", "calls torch.matmul", GPU),
    _hack("calls_reference", "kernels", "imports and calls the problem's reference", GPU),
    # honest controls
    _control("plain", "x @ w.T"),
    _control("launch_config_cache", "launch configuration cached by shape"),
    _control("empty_then_fill", "torch.empty filled by matmul(out=)"),
    _control("thread_pool", "thread pool joined before returning"),
    Submission(
        "controls/destination.py", "linear_into", None, CPU, "destination y filled in place"
    ),
    _control("triton_dot", 'Triton tl.dot, input_precision="ieee"', GPU),
    _control("side_stream", "side stream joined, record_stream on every tensor", GPU),
)
