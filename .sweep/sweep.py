import os, sys, time, importlib.util, itertools
DEV = "cuda"
sys.path.insert(0, "tests/examples/kernels")
import torch
from conftest import Example, _import_candidates, EXAMPLES, Run
from kernelaudit.problem.load import load_problem
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize, distributions_for
from kernelaudit.inputs.layouts import present, geometry
from kernelaudit.inputs.shapes import shape_cases
from kernelaudit.oracle.compare import compare
from kernelaudit.problem.spec import TensorInput, IndexInput, MaskInput, ScalarInput

only = sys.argv[1:]
for name in ["embedding_backward", "layernorm", "softmax", "matmul"]:
    if only and name not in only: continue
    folder = EXAMPLES / name
    ex = Example(folder, load_problem(folder/"problem.py"), _import_candidates(folder))
    P = ex.problem
    m = ex.manifest()["candidates"]
    cands = [(c["candidate"].split("::")[1], c["verdict"]) for c in m]
    sizes_list = shape_cases(P, 4, 132)
    worst = {}
    t_max = 0
    fails = []
    for ci, config in enumerate(P.dtype_configs()):
        for sizes, label in sizes_list:
            variants = [()]
            for inp in P.tensor_inputs:
                for d in distributions_for(inp):
                    variants.append(((inp.name, d),))
            for values in variants:
                case = Case(tuple(sizes.items()), ci, values, (), 0, label)
                inputs = materialize(P, case)
                args = [v.to(DEV) if isinstance(v, torch.Tensor) else v for v in inputs.values()]
                for cname, verdict in cands:
                    t0 = time.time()
                    try:
                        r = ex.run(cname, *args)
                    except Exception as e:
                        worst.setdefault((cname, "crash"), []).append(case.describe() + f" cfg{ci} {str(e)[:60]}")
                        continue
                    dt = time.time() - t0
                    if dt > t_max: t_max = dt; t_case = case.describe()
                    cmp = compare("y", r.result, r.truth, r.baseline, r.baseline.dtype)
                    ok = cmp.passed
                    if verdict == "PASS" and not ok:
                        fails.append((cname, case.describe(), ci, r.describe(), cmp.reason))
                    worst.setdefault((cname, ok), []).append(case.describe() + f" cfg{ci}")
    # layouts at workload
    for ci, config in enumerate(P.dtype_configs()):
        sizes, label = sizes_list[0]
        for inp in P.tensor_inputs:
            for layout in ("transposed", "permuted", "strided", "offset", "expanded"):
                case = Case(tuple(sizes.items()), ci, (), ((inp.name, layout),), 0, label)
                inputs = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in materialize(P, case).items()}
                shape = tuple(inputs[inp.name].shape)
                if geometry(layout, shape) is None: continue
                inputs[inp.name] = present(inputs[inp.name], layout, fill=float("nan") if inputs[inp.name].is_floating_point() else 0)
                for cname, verdict in cands:
                    r = ex.run(cname, *inputs.values())
                    cmp = compare("y", r.result, r.truth, r.baseline, r.baseline.dtype)
                    worst.setdefault((cname, cmp.passed), []).append(f"layout {inp.name}:{layout} cfg{ci}")
                    if verdict == "PASS" and not cmp.passed:
                        fails.append((cname, f"layout {inp.name}:{layout}", ci, r.describe(), cmp.reason))
    print(f"== {name}: slowest call {t_max:.2f}s {t_case}")
    for f in fails: print("  PASS-candidate failing:", f)
    for (cname, ok), cases in sorted(worst.items(), key=str):
        print(f"  {cname} ok={ok}: {len(cases)} cases" + ("" if ok else "; e.g. " + "; ".join(cases[:3])))
