"""Reports are blamed on the candidate only in kernels of its own: never in cuBLAS, cuDNN,
torch's own kernels, nor in kernels the reference launches too."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.sanitizer.attribution import attribute, is_library_kernel, kernel_base
from kernelaudit.sanitizer.report import parse

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("_oob_store", "_oob_store"),
        ("void tiled_transpose<float, (int)32>(const T1 *, T1 *, int, int)", "tiled_transpose"),
        ("(anonymous namespace)::scratch_kernel(double *, int)", "scratch_kernel"),
        ("unaligned_kernel()", "unaligned_kernel"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char *, 1>>(int, T2, T3)",
            "vectorized_elementwise_kernel",
        ),
        # the profiler's spelling of the same kernel
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
            "vectorized_elementwise_kernel",
        ),
    ],
)
def test_kernel_base_is_the_kernels_own_identifier(name: str, base: str) -> None:
    assert kernel_base(name) == base


@pytest.mark.parametrize(
    "name",
    [
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        "nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_NNT",
        "ampere_sgemm_128x64_nn",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(T1::Params)",
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>(T13)",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::cublasSplitKParams<T6>)",
        "void at::native::reduce_kernel<512, 1>(T3)",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096UL>)",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float>(float *)",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Params)",
    ],
)
def test_library_kernels_are_known_by_name(name: str) -> None:
    assert is_library_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "_oob_store",
        "matmul_kernel",
        "my_gemm_kernel",
        "triton_poi_fused_add_0",
        "flat::gather(float *)",
        "void tiled_transpose<float, (int)32>(const T1 *, T1 *, int, int)",
    ],
)
def test_the_candidates_own_kernels_are_not_library_kernels(name: str) -> None:
    assert not is_library_kernel(name)


def test_reports_in_library_kernels_or_in_no_kernel_are_not_blamed() -> None:
    output = parse((FIXTURES / "initcheck_library_only.txt").read_text(), "initcheck")
    split = attribute(output.reports, reference_kernels=())
    assert split.candidate == ()
    assert len(split.library) == 2 and len(split.outside) == 1


def test_a_kernel_the_reference_launches_too_is_not_the_candidates() -> None:
    output = parse((FIXTURES / "memcheck_templates.txt").read_text(), "memcheck")
    # the profiler spells names its own way; the reference here launched gather_rows too
    split = attribute(output.reports, reference_kernels=("void gather_rows<c10::Half>(...)",))
    blamed = [kernel_base(r.kernel) for r in split.candidate]
    assert blamed == ["tiled_transpose", "histogram_kernel", "scratch_kernel"]
    assert [kernel_base(r.kernel) for r in split.library] == [
        "gather_rows",
        "vectorized_elementwise_kernel",
    ]


def test_the_candidates_triton_kernel_is_blamed() -> None:
    output = parse((FIXTURES / "memcheck_triton_oob.txt").read_text(), "memcheck")
    split = attribute(output.reports, reference_kernels=("void at::native::copy_kernel(...)",))
    assert [r.kernel for r in split.candidate] == ["_oob_store", "_oob_store"]
