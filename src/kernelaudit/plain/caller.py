"""Call a function the way a user's program does, and save what it returned.

Run as `python main.py REQUEST RESULT`, a copy of this file in a folder of the run's own: it
imports torch and the candidate and nothing else, so the process has the shape of any program
that uses the candidate. No guard bands, no poison, no watching threads: `torch.empty` is
plain memory and the tensors are the caller's own. The candidate's file is compiled from its
source (bytecode next to it is neither read nor written), as a module named after the file.

REQUEST (torch.save, weights only): path, function, device, args (tensors and scalars in
order), slots ((shape, dtype name) of the preallocated outputs, destination style), mutates
(positions of inputs the call may change), most_calls and seconds (calls go on until either is
reached), state and functions (the flags and the functions to read before the candidate is
imported and after its calls, each named by its expression from `torch` or `time`). RESULT:
calls made, seconds taken, the first and the last call's outputs and mutated inputs on the CPU,
and each flag's, function's and random number generator's state before and after, as text; or
an error and its kind.
"""

import hashlib
import sys
import time
import traceback
import types
from pathlib import Path

import torch


def load(path: str, function: str) -> object:
    source = Path(path)
    module = types.ModuleType(source.stem)
    module.__file__ = str(source)
    sys.modules[source.stem] = module
    sys.path.insert(0, str(source.parent))
    exec(compile(source.read_bytes(), str(source), "exec"), module.__dict__)
    return getattr(module, function)


def resolve(name: str) -> object:
    """What a state's name reads: "torch.a.b" or "time.f" by attribute, "torch.f()" the
    function's result."""
    root, *parts = name.removesuffix("()").split(".")
    value = {"torch": torch, "time": time}[root]
    for part in parts:
        value = getattr(value, part)
    return value() if name.endswith("()") else value


def look(request: dict, device: torch.device) -> dict:
    """The process-wide state: each flag's repr, each function as the object, each random
    number generator's state by a digest."""
    seen = {}
    for name in request["state"]:
        try:
            seen[name] = repr(resolve(name))
        except Exception as error:  # a flag this build lacks
            seen[name] = f"<unreadable: {type(error).__name__}>"
    for name in request["functions"]:
        try:
            seen[name] = resolve(name)
        except Exception:  # a function this build lacks
            seen[name] = None
    seen["torch RNG state (CPU)"] = digest(torch.get_rng_state())
    if device.type == "cuda":
        seen["torch RNG state (CUDA)"] = digest(torch.cuda.get_rng_state(device))
    return seen


def digest(state: torch.Tensor) -> str:
    return hashlib.sha1(state.numpy().tobytes()).hexdigest()[:12]


def described(value: object) -> str:
    if value is None:
        return "<removed>"
    if isinstance(value, str):
        return value
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{name}"


def compared(before: dict, after: dict) -> dict:
    """name -> [before, after] as text; a function replaced by another of the same name is
    told apart ("(another object)")."""
    pairs = {}
    for name, then in before.items():
        now = after.get(name)
        # `is` for functions; `==` for methods, which are made anew on every lookup
        same = now is then or now == then
        text = described(then)
        later = text if same else described(now)
        if not same and later == text:
            later += " (another object)"
        pairs[name] = [text, later]
    return pairs


def on_cpu(tensors: list) -> list:
    return [t.detach().to("cpu", copy=True) for t in tensors]


def returned_tensors(returned: object) -> list:
    if isinstance(returned, torch.Tensor):
        return [returned]
    if isinstance(returned, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in returned):
        return list(returned)
    raise TypeError(f"returned {type(returned).__name__}, not a tensor or a tuple of tensors")


def main(request_path: str, result_path: str) -> None:
    request = torch.load(request_path, weights_only=True)
    device = torch.device(request["device"])
    before = look(request, device)
    try:
        function = load(request["path"], request["function"])
    except BaseException:
        torch.save({"error": traceback.format_exc(), "kind": "load"}, result_path)
        return
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in request["args"]]
    slots = [(tuple(shape), getattr(torch, dtype)) for shape, dtype in request["slots"]]
    kept = {}
    calls = 0
    began = time.perf_counter()
    try:
        while True:
            given = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in slots]
            returned = function(*given, *outputs)
            produced = outputs or returned_tensors(returned)
            calls += 1
            done = calls >= request["most_calls"] or (
                time.perf_counter() - began >= request["seconds"]
            )
            if calls == 1 or done:
                changed = [given[p] for p in request["mutates"]]
                kept["first" if calls == 1 else "last"] = (on_cpu(produced), on_cpu(changed))
            if done:
                break
    except BaseException:
        torch.save(
            {"error": traceback.format_exc(), "kind": "exception", "calls": calls}, result_path
        )
        return
    kept.setdefault("last", kept["first"])
    torch.save(
        {
            "calls": calls,
            "seconds": time.perf_counter() - began,
            "first": list(kept["first"]),
            "last": list(kept["last"]),
            "state": compared(before, look(request, device)),
        },
        result_path,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
