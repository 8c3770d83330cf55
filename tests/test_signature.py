"""Signature parsing on the seed's names and on harder real demangler output."""

import pytest

from cudump.kernels.demangle import demangle
from cudump.kernels.signature import ParamType, parse_param_type, parse_signature

ZED = ("void device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
       "(uchar4*, int, device::uchar8*, device::uchar8*, int, int, int, float)")


def P(text, base, depth=0, const=False, **kw):
    return ParamType(text, base, depth, const, **kw)


def test_seed_zed_kernel():
    sig = parse_signature(ZED)
    assert sig.demangled == ZED
    assert sig.return_type == "void"
    assert sig.qualified_name == "device::FrP0k5607tPV<(sl::YUV_CONVENTION)2>"
    assert sig.base_name == "FrP0k5607tPV"
    assert sig.params == (
        P("uchar4*", "uchar4", 1), P("int", "int"),
        P("device::uchar8*", "device::uchar8", 1), P("device::uchar8*", "device::uchar8", 1),
        P("int", "int"), P("int", "int"), P("int", "int"), P("float", "float"))
    assert [p.is_pointer for p in sig.params] == [True, False, True, True] + [False] * 4


def test_seed_nv12_kernel_has_no_return_type():
    sig = parse_signature(demangle("_Z12nv12_to_uyvyPKhjPhjjj"))
    assert sig.return_type == ""
    assert sig.qualified_name == sig.base_name == "nv12_to_uyvy"
    assert sig.params == (
        P("unsigned char const*", "unsigned char", 1, True), P("unsigned int", "unsigned int"),
        P("unsigned char*", "unsigned char", 1), P("unsigned int", "unsigned int"),
        P("unsigned int", "unsigned int"), P("unsigned int", "unsigned int"))


def test_seed_texture_kernel():
    sig = parse_signature("device::mZd2jMuKVE2EgUg(unsigned long long, unsigned long long, "
                          "uchar4*, uchar4*, unsigned int, int, int, float, float)")
    assert sig.qualified_name == "device::mZd2jMuKVE2EgUg"
    assert sig.base_name == "mZd2jMuKVE2EgUg"
    assert [p.base for p in sig.params] == (
        ["unsigned long long"] * 2 + ["uchar4"] * 2 + ["unsigned int", "int", "int", "float",
                                                      "float"])
    assert [p.pointer_depth for p in sig.params] == [0, 0, 1, 1, 0, 0, 0, 0, 0]


def test_extern_c_name_has_no_parameter_list():
    sig = parse_signature("nv12_to_uyvy")
    assert (sig.qualified_name, sig.base_name, sig.params) == (
        "nv12_to_uyvy", "nv12_to_uyvy", None)


def test_empty_parameter_list():
    assert parse_signature("at::native::user()").params == ()


def test_pytorch_vectorized_kernel_with_space_before_closing_bracket():
    text = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
            " std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul>)")
    sig = parse_signature(text)
    assert sig.return_type == "void"
    assert sig.qualified_name == ("at::native::vectorized_elementwise_kernel<4, "
                                  "at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >")
    assert sig.base_name == "vectorized_elementwise_kernel"
    assert sig.params == (P("int", "int"),
                          P("at::native::CUDAFunctor_add<float>",
                            "at::native::CUDAFunctor_add<float>"),
                          P("std::array<char*, 3ul>", "std::array<char*, 3ul>"))


def test_cutlass_kernel_with_casts_in_nested_template_arguments():
    mangled = "_ZN7cutlass7Kernel2INS_4gemm6kernel4GemmINS_4arch4Sm80ELNS4_2OpE1EEEEEvT_"
    gemm = "cutlass::gemm::kernel::Gemm<cutlass::arch::Sm80, (cutlass::arch::Op)1>"
    text = demangle(mangled)
    assert text == f"void cutlass::Kernel2<{gemm} >({gemm})"
    sig = parse_signature(text)
    assert sig.qualified_name == f"cutlass::Kernel2<{gemm} >"
    assert sig.base_name == "Kernel2"
    assert sig.params == (P(gemm, gemm),)


def test_lambdas_anonymous_namespace_function_pointers_and_arrays():
    mangled = "_ZN2at6native12_GLOBAL__N_16launchIZNS0_4userEvEUliE_EEviT_PKfPFdifEPA4_iyPPKc"
    lam = "at::native::user()::{lambda(int)#1}"
    text = demangle(mangled)
    assert text == (f"void at::native::(anonymous namespace)::launch<{lam}>(int, {lam}, "
                    "float const*, double (*)(int, float), int (*) [4], unsigned long long, "
                    "char const**)")
    sig = parse_signature(text)
    assert sig.qualified_name == f"at::native::(anonymous namespace)::launch<{lam}>"
    assert sig.base_name == "launch"
    assert sig.params == (
        P("int", "int"), P(lam, lam), P("float const*", "float", 1, True),
        P("double (*)(int, float)", "double (int, float)", 1, function=True),
        P("int (*) [4]", "int", 1, extents=("4",)),
        P("unsigned long long", "unsigned long long"),
        P("char const**", "char", 2, True))


def test_const_of_a_lambda_scope_is_part_of_the_name():
    mangled = "_ZN2at6native12_GLOBAL__N_12k2IZZNS0_5user2EvENKUlfE0_clEfEUliE_EEvT_NS1_3AccIfEE"
    lam = "at::native::user2()::{lambda(float)#2}::operator()(float) const::{lambda(int)#1}"
    text = demangle(mangled)
    assert text == (f"void at::native::(anonymous namespace)::k2<{lam}>({lam}, "
                    "at::native::(anonymous namespace)::Acc<float>)")
    sig = parse_signature(text)
    assert sig.return_type == "void"
    assert sig.base_name == "k2"
    assert sig.params[0] == P(lam, lam)


def test_lambda_call_operator_with_trailing_const():
    text = demangle("_ZZZN2at6native5user2EvENKUlfE0_clEfENKUliE_clEi")
    assert text == ("at::native::user2()::{lambda(float)#2}::operator()(float) const::"
                    "{lambda(int)#1}::operator()(int) const")
    sig = parse_signature(text)
    assert sig.return_type == ""
    assert sig.qualified_name == text[:-len("(int) const")]
    assert sig.base_name == "operator()"
    assert sig.params == (P("int", "int"),)


def test_operator_template_and_comparison_inside_template_argument():
    text = demangle("_ZN2at6nativelsIiEEvSt5arrayIT_Lm2EEi")
    assert text == "void at::native::operator<< <int>(std::array<int, 2ul>, int)"
    sig = parse_signature(text)
    assert (sig.return_type, sig.qualified_name, sig.base_name) == (
        "void", "at::native::operator<< <int>", "operator<<")
    expr = parse_signature(demangle("_Z6expr_tILi1ELi2EEvPAqultT_T0_Li1ELi2E_c"))
    assert expr.base_name == "expr_t"
    assert expr.params == (P("char (*) [((1)<(2))?(1) : (2)]", "char", 1,
                             extents=("((1)<(2))?(1) : (2)",)),)


def test_references_volatile_and_pointer_constness():
    sig = parse_signature(demangle("_Z4frefRfOiPViPKPien"))
    assert sig.params == (
        P("float&", "float", reference=True), P("int&&", "int", reference=True),
        P("int volatile*", "int", 1), P("int* const*", "int", 2),
        P("long double", "long double"), P("__int128", "__int128"))


def test_restrict_clone_suffix_abi_tag_and_operator_new():
    sig = parse_signature("void foo<int>(float* __restrict__, float const* __restrict__, int)"
                          " [clone .cold]")
    assert sig.qualified_name == "foo<int>"
    assert sig.params == (P("float* __restrict__", "float", 1),
                          P("float const* __restrict__", "float", 1, True), P("int", "int"))
    assert parse_signature("void foo[abi:cxx11]<int>(int)").base_name == "foo"
    new = parse_signature("void operator new[](unsigned long)")
    assert (new.qualified_name, new.params) == (
        "operator new[]", (P("unsigned long", "unsigned long"),))


def test_anonymous_namespace_without_return_type():
    sig = parse_signature("(anonymous namespace)::bar(int)")
    assert (sig.return_type, sig.qualified_name, sig.base_name) == (
        "", "(anonymous namespace)::bar", "bar")


@pytest.mark.parametrize("text,base,depth,const", [
    ("const float*", "float", 1, True),
    ("float* const", "float", 1, False),
    ("unsigned long long const* const*", "unsigned long long", 2, True),
    ("c10::Half*", "c10::Half", 1, False),
])
def test_param_type_qualifiers(text, base, depth, const):
    p = parse_param_type(text)
    assert (p.text, p.base, p.pointer_depth, p.const) == (text, base, depth, const)


def test_callable_text_drops_the_return_type():
    assert parse_signature(ZED).callable_text == ZED[len("void "):]


def test_library_kernels_say_their_type_in_a_block_of_their_name() -> None:
    """cuDNN's and cuBLAS's plain C kernel names: A, B, math, accumulator, C; buffers of the
    type A, B and C share, none where they differ or the name has no such block."""
    from cudump.kernels.elements import float_type_in_name

    conv = ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
            "_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn")
    found = float_type_in_name(conv)
    assert found is not None and found.dtype == "float32"
    bf16 = float_type_in_name("sm80_xmma_gemm_bf16bf16_bf16f32_bf16_tn_n_tilesize64x64x64")
    assert bf16 is not None and bf16.dtype == "uint16" and "bfloat16" in (bf16.note or "")
    assert float_type_in_name("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64") is None
    assert float_type_in_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") is None
