#!/usr/bin/env python3
"""Regenerate the binary importer fixtures under crates/core/tests/fixtures/import/.

The fixtures are written by the reference writers:

* safetensors files by the `safetensors` package (its Rust serializer, the same
  code path `safetensors.torch.save_file` uses); dtypes numpy cannot express
  (BF16, F8_*, F4) go through `safetensors.serialize_file` with raw buffers;
* GGUF files by `gguf.GGUFWriter` (the package llama.cpp publishes), quantized
  with `gguf.quants.quantize` where the package can quantize the type.

`expected.json` is computed from the tensor shapes declared in this script and
the size tables below (DOMAIN.md section 1.5 and the safetensors dtype sizes),
not by reading the files back. The files are then read back with the reference
readers (`safetensors.safe_open` plus a raw header parse, `gguf.GGUFReader`) and
every computed number is checked against what they report; any mismatch aborts.
The only values taken from the written files are marked "observed" (header
length, data offset, file size): they depend on JSON/KV serialization details.

Requirements (see the README next to the fixtures for the versions used):
    python3 -m venv /tmp/fixtures-venv
    /tmp/fixtures-venv/bin/pip install safetensors numpy gguf
    /tmp/fixtures-venv/bin/python tools/make-import-fixtures.py

CI does not run this script; the generated files are committed.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import shutil
import struct
import sys
from dataclasses import dataclass, field
from importlib.metadata import version as pkg_version
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import gguf
import gguf.gguf_writer
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from safetensors import TensorSpec, safe_open, serialize_file
from safetensors.numpy import save_file as st_save_numpy

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "crates" / "core" / "tests" / "fixtures" / "import"

# ---------------------------------------------------------------------------
# Independent size tables.
# ---------------------------------------------------------------------------

# safetensors header dtype -> bits per element (safetensors format spec; F4 is
# a 4-bit element, two per byte).
ST_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4,
}

# header dtype -> dtype string accepted by safetensors.TensorSpec.
ST_SPEC_NAME: dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "I64": "int64", "U64": "uint64", "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F4": "float4_e2m1fn_x2",
}

# dtypes numpy can hold natively (those files go through safetensors.numpy.save_file).
ST_NUMPY: dict[str, Any] = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32,
    "I64": np.int64, "U64": np.uint64, "F64": np.float64, "C64": np.complex64,
}

# ggml type -> (block size in elements, bytes per block); DOMAIN.md section 1.5.
GGML_BLOCK: dict[str, tuple[int, int]] = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q8_0": (32, 34), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
    "Q5_K": (256, 176), "Q6_K": (256, 210), "MXFP4": (32, 17),
}

GGUF_DEFAULT_ALIGNMENT = 32  # DOMAIN.md section 1.5


def prod(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def st_nbytes(dtype: str, shape: list[int]) -> int:
    bits = prod(shape) * ST_BITS[dtype]
    assert bits % 8 == 0, (dtype, shape)
    return bits // 8


def ggml_nbytes(gtype: str, ne: list[int]) -> int:
    block, size = GGML_BLOCK[gtype]
    assert ne[0] % block == 0, f"row length {ne[0]} not a multiple of {gtype} block {block}"
    return math.ceil(prod(ne) / block) * size


def pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


RNG = np.random.default_rng(20240601)


def randn(shape: list[int], scale: float = 0.02) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------


@dataclass
class StTensor:
    name: str
    dtype: str  # header dtype string
    shape: list[int]  # logical shape as it appears in the header
    data: np.ndarray  # raw little-endian storage with exactly nbytes bytes

    @property
    def nbytes(self) -> int:
        return st_nbytes(self.dtype, self.shape)


def st_float(name: str, dtype: str, shape: list[int], scale: float = 0.02, ones: bool = False) -> StTensor:
    x = np.ones(shape, np.float32) if ones else randn(shape, scale)
    if dtype == "BF16":
        data = f32_to_bf16_bits(x)
    else:
        data = x.astype(ST_NUMPY[dtype])
    return StTensor(name, dtype, list(shape), data)


def st_raw(name: str, dtype: str, shape: list[int], data: np.ndarray) -> StTensor:
    return StTensor(name, dtype, list(shape), np.ascontiguousarray(data))


def st_write(path: Path, tensors: list[StTensor], metadata: dict[str, str] | None) -> None:
    for t in tensors:
        assert t.data.nbytes == t.nbytes, (t.name, t.data.nbytes, t.nbytes)
    path.parent.mkdir(parents=True, exist_ok=True)
    if all(t.dtype in ST_NUMPY for t in tensors):
        arrays = {t.name: t.data.reshape(t.shape) for t in tensors}
        st_save_numpy(arrays, str(path), metadata=metadata)
        return
    keep: list[np.ndarray] = []
    specs = {}
    for t in tensors:
        buf = np.ascontiguousarray(t.data)
        keep.append(buf)
        shape = list(t.shape)
        if t.dtype == "F4":
            # TensorSpec takes the packed storage shape for float4_e2m1fn_x2 and
            # doubles the last dimension itself; the header gets the logical shape.
            assert shape[-1] % 2 == 0
            shape[-1] //= 2
        specs[t.name] = TensorSpec(dtype=ST_SPEC_NAME[t.dtype], shape=shape,
                                   data_ptr=buf.ctypes.data, data_len=buf.nbytes)
    serialize_file(specs, str(path), metadata=metadata)
    del keep


def st_expected(tensors: list[StTensor], metadata: dict[str, str] | None, params: int,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    by_dtype_bytes: dict[str, int] = {}
    by_dtype_elems: dict[str, int] = {}
    for t in tensors:
        by_dtype_bytes[t.dtype] = by_dtype_bytes.get(t.dtype, 0) + t.nbytes
        by_dtype_elems[t.dtype] = by_dtype_elems.get(t.dtype, 0) + prod(t.shape)
    exp: dict[str, Any] = {
        "format": "safetensors",
        "metadata": metadata,
        "tensor_count": len(tensors),
        "bytes_by_dtype": dict(sorted(by_dtype_bytes.items())),
        "elements_by_dtype": dict(sorted(by_dtype_elems.items())),
        "total_bytes": sum(by_dtype_bytes.values()),
        "total_elements": sum(by_dtype_elems.values()),
        "params": params,
    }
    if extra:
        exp.update(extra)
    exp["tensors"] = [
        {"name": t.name, "dtype": t.dtype, "shape": t.shape, "bytes": t.nbytes}
        for t in sorted(tensors, key=lambda t: t.name)
    ]
    return exp


def st_verify(path: Path, exp: dict[str, Any]) -> dict[str, Any]:
    """Check a written safetensors file against the computed expectation.

    Returns the observed serialization details."""
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header_bytes = raw[8:8 + header_len]
    header = json.loads(header_bytes)
    meta = header.pop("__metadata__", None)
    assert meta == exp["metadata"], (path, meta, exp["metadata"])
    want = {t["name"]: t for t in exp["tensors"]}
    assert set(header) == set(want), (path, set(header) ^ set(want))
    spans = []
    for name, info in header.items():
        w = want[name]
        assert info["dtype"] == w["dtype"], (name, info["dtype"], w["dtype"])
        assert info["shape"] == w["shape"], (name, info["shape"], w["shape"])
        begin, end = info["data_offsets"]
        assert end - begin == w["bytes"], (name, end - begin, w["bytes"])
        spans.append((begin, end))
    spans.sort()
    cursor = 0
    for begin, end in spans:
        assert begin == cursor, (path, "gap or overlap in data_offsets", begin, cursor)
        cursor = end
    assert cursor == exp["total_bytes"], (path, cursor, exp["total_bytes"])
    assert len(raw) == 8 + header_len + exp["total_bytes"], path
    # Second reference reader: the safetensors library itself.
    with safe_open(str(path), framework="numpy") as f:
        assert (f.metadata() or None) == exp["metadata"], path
        assert set(f.keys()) == set(want), path
        for name in f.keys():
            sl = f.get_slice(name)
            assert sl.get_dtype() == want[name]["dtype"], (name, sl.get_dtype())
            assert list(sl.get_shape()) == want[name]["shape"], (name, sl.get_shape())
    stripped = header_bytes.rstrip(b" ")
    first_key = next(iter(json.loads(header_bytes)), None)
    return {
        "file_size": len(raw),
        "header_len": header_len,
        "header_padding_spaces": len(header_bytes) - len(stripped),
        "first_header_key": first_key,
        "data_start": 8 + header_len,
    }


# --- tiny Llama shapes (shared by several safetensors fixtures) ------------

LLAMA = dict(layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256)
LLAMA_HEAD_DIM = LLAMA["hidden"] // LLAMA["heads"]


def llama_linears(layer: int) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of one decoder layer."""
    h, f = LLAMA["hidden"], LLAMA["ffn"]
    q = LLAMA["heads"] * LLAMA_HEAD_DIM
    kv = LLAMA["kv_heads"] * LLAMA_HEAD_DIM
    p = f"model.layers.{layer}"
    return [
        (f"{p}.self_attn.q_proj", h, q),
        (f"{p}.self_attn.k_proj", h, kv),
        (f"{p}.self_attn.v_proj", h, kv),
        (f"{p}.self_attn.o_proj", q, h),
        (f"{p}.mlp.gate_proj", h, f),
        (f"{p}.mlp.up_proj", h, f),
        (f"{p}.mlp.down_proj", f, h),
    ]


def llama_norms(layer: int) -> list[str]:
    p = f"model.layers.{layer}"
    return [f"{p}.input_layernorm.weight", f"{p}.post_attention_layernorm.weight"]


def llama_formula_params(cfg: dict[str, int], head_dim: int, tied: bool) -> int:
    """DOMAIN.md section 2.1 dense-decoder formula."""
    h, inter, L, a, kv, V = (cfg["hidden"], cfg["ffn"], cfg["layers"], cfg["heads"],
                            cfg["kv_heads"], cfg["vocab"])
    d = head_dim
    attn = h * (a * d) + 2 * h * (kv * d) + (a * d) * h
    mlp = 3 * h * inter
    norms = 2 * h
    return L * (attn + mlp + norms) + V * h * (1 if tied else 2) + h


def llama_hf_config(torch_dtype: str, tied: bool, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "head_dim": LLAMA_HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": LLAMA["hidden"],
        "intermediate_size": LLAMA["ffn"],
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": LLAMA["heads"],
        "num_hidden_layers": LLAMA["layers"],
        "num_key_value_heads": LLAMA["kv_heads"],
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tied,
        "torch_dtype": torch_dtype,
        "vocab_size": LLAMA["vocab"],
    }
    if extra:
        cfg.update(extra)
    return dict(sorted(cfg.items()))


def write_config(path: Path, cfg: dict[str, Any]) -> None:
    # Same serialization as transformers' PretrainedConfig.to_json_file.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def make_tiny_llama() -> tuple[list[StTensor], dict[str, str], dict[str, Any]]:
    """BF16 weights, F32 norms, untied lm_head."""
    h, V = LLAMA["hidden"], LLAMA["vocab"]
    ts = [st_float("model.embed_tokens.weight", "BF16", [V, h])]
    for i in range(LLAMA["layers"]):
        for n in llama_norms(i):
            ts.append(st_float(n, "F32", [h], ones=True))
        for name, fin, fout in llama_linears(i):
            ts.append(st_float(f"{name}.weight", "BF16", [fout, fin]))
    ts.append(st_float("model.norm.weight", "F32", [h], ones=True))
    ts.append(st_float("lm_head.weight", "BF16", [V, h]))
    meta = {"format": "pt"}
    params = sum(prod(t.shape) for t in ts)
    formula = llama_formula_params(LLAMA, LLAMA_HEAD_DIM, tied=False)
    assert params == formula, (params, formula)
    exp = st_expected(ts, meta, params, {
        "params_from_config_formula": formula,
        "companion_config": "tiny-llama.config.json",
    })
    return ts, meta, exp


def make_gptq() -> tuple[list[StTensor], dict[str, str], dict[str, Any]]:
    """AutoGPTQ layout (DOMAIN.md 1.4), 4 bits, group size 32, F16 elsewhere."""
    bits, group = 4, 32
    h, V = LLAMA["hidden"], LLAMA["vocab"]
    ts = [st_float("model.embed_tokens.weight", "F16", [V, h])]
    logical = V * h
    qlinear_bytes = 0
    for i in range(LLAMA["layers"]):
        for n in llama_norms(i):
            ts.append(st_float(n, "F16", [h], ones=True))
            logical += h
        for name, fin, fout in llama_linears(i):
            groups = math.ceil(fin / group)
            qweight = RNG.integers(-2**31, 2**31 - 1, size=[fin * bits // 32, fout], dtype=np.int64).astype(np.int32)
            qzeros = np.full([groups, fout * bits // 32], 0x77777777, dtype=np.int32)
            scales = (np.abs(randn([groups, fout], 0.01)) + 1e-3).astype(np.float16)
            g_idx = (np.arange(fin) // group).astype(np.int32)
            ts += [
                st_raw(f"{name}.qweight", "I32", [fin * bits // 32, fout], qweight),
                st_raw(f"{name}.qzeros", "I32", [groups, fout * bits // 32], qzeros),
                st_raw(f"{name}.scales", "F16", [groups, fout], scales),
                st_raw(f"{name}.g_idx", "I32", [fin], g_idx),
            ]
            logical += fin * fout
            # DOMAIN.md 1.4: in*out*bits/8 + (in/g)*out*(2 + bits/8) + 4*in
            qlinear_bytes += fin * fout * bits // 8 + groups * fout * (2 * 8 + bits) // 8 + 4 * fin
    ts.append(st_float("model.norm.weight", "F16", [h], ones=True))
    ts.append(st_float("lm_head.weight", "F16", [V, h]))
    logical += h + V * h
    assert logical == llama_formula_params(LLAMA, LLAMA_HEAD_DIM, tied=False)
    computed_q = sum(t.nbytes for t in ts if t.name.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx"))
    assert computed_q == qlinear_bytes, (computed_q, qlinear_bytes)
    meta = {"format": "pt"}
    exp = st_expected(ts, meta, logical, {
        "params_note": "logical weights: each packed int32 of qweight holds 32/bits weights; "
                       "qzeros/scales/g_idx are quantization overhead, not parameters",
        "quantization": {"method": "gptq", "bits": bits, "group_size": group, "sym": True, "desc_act": False},
        "quantized_linear_bytes": qlinear_bytes,
        "companion_config": "tiny-llama-gptq.config.json",
    })
    return ts, meta, exp


def make_fp8() -> tuple[list[StTensor], dict[str, str], dict[str, Any]]:
    """DeepSeek-V3 style block FP8: F8_E4M3 weights + F32 weight_scale_inv per 128x128 block."""
    block = 128
    h, V = LLAMA["hidden"], LLAMA["vocab"]
    ts = [st_float("model.embed_tokens.weight", "BF16", [V, h])]
    params = V * h
    for i in range(LLAMA["layers"]):
        for n in llama_norms(i):
            ts.append(st_float(n, "BF16", [h], ones=True))
            params += h
        for name, fin, fout in llama_linears(i):
            # e4m3fn codes without the NaN pattern (S.1111.111).
            codes = RNG.integers(0, 0x7E, size=[fout, fin], dtype=np.int64).astype(np.uint8)
            codes |= (RNG.integers(0, 2, size=[fout, fin]) << 7).astype(np.uint8)
            sshape = [math.ceil(fout / block), math.ceil(fin / block)]
            ts.append(st_raw(f"{name}.weight", "F8_E4M3", [fout, fin], codes))
            ts.append(st_raw(f"{name}.weight_scale_inv", "F32", sshape,
                             np.full(sshape, 1.0 / 448.0, np.float32)))
            params += fin * fout
    ts.append(st_float("model.norm.weight", "BF16", [h], ones=True))
    ts.append(st_float("lm_head.weight", "BF16", [V, h]))
    params += h + V * h
    assert params == llama_formula_params(LLAMA, LLAMA_HEAD_DIM, tied=False)
    meta = {"format": "pt"}
    exp = st_expected(ts, meta, params, {
        "params_note": "weight_scale_inv tensors are quantization overhead, not parameters",
        "quantization": {"method": "fp8", "fmt": "e4m3", "weight_block_size": [block, block]},
        "companion_config": "tiny-llama-fp8.config.json",
    })
    return ts, meta, exp


GPTOSS = dict(layers=2, hidden=64, inter=64, experts=4, top_k=2, heads=4, kv_heads=2, head_dim=16, vocab=128)


def make_gptoss_mxfp4() -> tuple[list[StTensor], dict[str, str], dict[str, Any]]:
    """gpt-oss checkpoint layout: MoE experts as MXFP4 (U8 blocks of 16 bytes = 32 FP4
    values, U8 E8M0 scale per block), everything else BF16."""
    c = GPTOSS
    h, I, E, V = c["hidden"], c["inter"], c["experts"], c["vocab"]
    q, kv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
    ts = [st_float("model.embed_tokens.weight", "BF16", [V, h])]
    params = V * h
    for i in range(c["layers"]):
        p = f"model.layers.{i}"
        bf16 = [
            (f"{p}.input_layernorm.weight", [h]),
            (f"{p}.post_attention_layernorm.weight", [h]),
            (f"{p}.self_attn.q_proj.weight", [q, h]), (f"{p}.self_attn.q_proj.bias", [q]),
            (f"{p}.self_attn.k_proj.weight", [kv, h]), (f"{p}.self_attn.k_proj.bias", [kv]),
            (f"{p}.self_attn.v_proj.weight", [kv, h]), (f"{p}.self_attn.v_proj.bias", [kv]),
            (f"{p}.self_attn.o_proj.weight", [h, q]), (f"{p}.self_attn.o_proj.bias", [h]),
            (f"{p}.self_attn.sinks", [c["heads"]]),
            (f"{p}.mlp.router.weight", [E, h]), (f"{p}.mlp.router.bias", [E]),
            (f"{p}.mlp.experts.gate_up_proj_bias", [E, 2 * I]),
            (f"{p}.mlp.experts.down_proj_bias", [E, h]),
        ]
        for name, shape in bf16:
            ts.append(st_float(name, "BF16", shape))
            params += prod(shape)
        for proj, rows, k in (("gate_up_proj", 2 * I, h), ("down_proj", h, I)):
            assert k % 32 == 0
            bshape = [E, rows, k // 32, 16]
            sshape = [E, rows, k // 32]
            ts.append(st_raw(f"{p}.mlp.experts.{proj}_blocks", "U8", bshape,
                             RNG.integers(0, 256, size=bshape, dtype=np.int64).astype(np.uint8)))
            ts.append(st_raw(f"{p}.mlp.experts.{proj}_scales", "U8", sshape,
                             RNG.integers(118, 128, size=sshape, dtype=np.int64).astype(np.uint8)))
            params += E * rows * k  # two FP4 values per block byte
    ts.append(st_float("model.norm.weight", "BF16", [h], ones=True))
    ts.append(st_float("lm_head.weight", "BF16", [V, h]))
    params += h + V * h
    meta = {"format": "pt"}
    exp = st_expected(ts, meta, params, {
        "params_note": "each U8 byte of *_blocks holds two FP4 (E2M1) weights; *_scales "
                       "(one E8M0 byte per 32 weights) are overhead, not parameters",
        "quantization": {"method": "mxfp4", "block": 32, "bits_per_weight": 4.25},
        "mxfp4_expert_weights": sum(c["experts"] * r * k for r, k in ((2 * I, h), (h, I))) * c["layers"],
        "companion_config": "tiny-gptoss-mxfp4.config.json",
    })
    return ts, meta, exp


def make_dtype_sampler() -> tuple[list[StTensor], dict[str, str], dict[str, Any]]:
    """One tensor per dtype the safetensors writer accepts, plus a 0-d and an empty tensor."""
    ts: list[StTensor] = []
    for dtype in ST_BITS:
        shape = [2, 8]
        nbytes = st_nbytes(dtype, shape)
        if dtype in ST_NUMPY:
            data = (np.arange(16) % 2).astype(ST_NUMPY[dtype]).reshape(shape)
        else:
            data = np.full(nbytes, 0x38 if dtype.startswith("F8") else 0x22, dtype=np.uint8)
            if dtype == "F8_E8M0":
                data[:] = 127  # 2^0
            if dtype == "BF16":
                data = f32_to_bf16_bits(np.linspace(-1, 1, 16, dtype=np.float32))
        ts.append(st_raw(f"dtype.{dtype.lower()}", dtype, shape, data))
    ts.append(st_raw("edge.scalar_f32", "F32", [], np.array(0.5, np.float32)))
    ts.append(st_raw("edge.empty_f16", "F16", [0, 4], np.zeros([0, 4], np.float16)))
    ts.append(st_raw("edge.odd_shape_bf16", "BF16", [3, 5, 7],
                     f32_to_bf16_bits(randn([3, 5, 7]))))
    meta = {"format": "pt", "note": "dtype sampler, not a model"}
    exp = st_expected(ts, meta, sum(prod(t.shape) for t in ts), {
        "params_note": "not a model: params = total elements (F4 counted as 4-bit elements)",
    })
    return ts, meta, exp


def make_sharded() -> dict[str, Any]:
    """Tied-embedding F16 tiny Llama saved the way transformers save_pretrained does with a
    max_shard_size: huggingface_hub's greedy split in state-dict order, files
    model-0000i-of-0000n.safetensors with {"format": "pt"} metadata, and
    model.safetensors.index.json = {"metadata": {"total_size": N}, "weight_map": {...}}
    serialized with json.dumps(indent=2, sort_keys=True) + newline."""
    h, V = LLAMA["hidden"], LLAMA["vocab"]
    state: list[StTensor] = [st_float("model.embed_tokens.weight", "F16", [V, h])]
    for i in range(LLAMA["layers"]):
        for name, fin, fout in llama_linears(i):
            state.append(st_float(f"{name}.weight", "F16", [fout, fin]))
        for n in llama_norms(i):
            state.append(st_float(n, "F16", [h], ones=True))
    state.append(st_float("model.norm.weight", "F16", [h], ones=True))
    # tie_word_embeddings=true: lm_head.weight is not saved.
    max_shard_size = 100_000
    shards: list[list[StTensor]] = [[]]
    size = 0
    for t in state:
        if shards[-1] and size + t.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    n = len(shards)
    assert n == 2, n
    folder = OUT / "sharded"
    meta = {"format": "pt"}
    weight_map: dict[str, str] = {}
    entries: dict[str, Any] = {}
    for k, shard in enumerate(shards, start=1):
        fname = f"model-{k:05d}-of-{n:05d}.safetensors"
        st_write(folder / fname, shard, meta)
        for t in shard:
            weight_map[t.name] = fname
        entries[f"sharded/{fname}"] = (shard, meta)
    total_size = sum(t.nbytes for t in state)
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    write_config(folder / "config.json", llama_hf_config("float16", tied=True))
    params = sum(prod(t.shape) for t in state)
    assert params == llama_formula_params(LLAMA, LLAMA_HEAD_DIM, tied=True)
    return {"entries": entries, "total_size": total_size, "params": params,
            "weight_map_len": len(weight_map), "shard_count": n}


# ---------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------


@dataclass
class GgTensor:
    name: str
    gtype: str
    ne: list[int]  # GGUF order: ne[0] is the row length (fastest varying)
    data: np.ndarray = field(repr=False)
    raw_dtype: GGMLQuantizationType | None = None

    @property
    def nbytes(self) -> int:
        return ggml_nbytes(self.gtype, self.ne)


def craft_kquant(gtype: str, ne: list[int]) -> np.ndarray:
    """gguf.quants cannot quantize K-quants (dequantize only), so K-quant blocks are
    built directly: random quant bits with small finite f16 super-block scales."""
    block, size = GGML_BLOCK[gtype]
    rows = prod(ne[1:])
    nblocks = ne[0] // block
    b = RNG.integers(0, 256, size=[rows, nblocks, size], dtype=np.int64).astype(np.uint8)
    d = np.array([0.01], np.float16).view(np.uint8)
    dmin = np.array([0.005], np.float16).view(np.uint8)
    if gtype in ("Q4_K", "Q5_K", "Q2_K"):
        if gtype == "Q2_K":  # scales[16], qs[64], d, dmin
            b[..., 80:82] = d
            b[..., 82:84] = dmin
        else:  # d, dmin, scales[12], ...
            b[..., 0:2] = d
            b[..., 2:4] = dmin
    elif gtype == "Q6_K":  # ql[128], qh[64], scales[16], d
        b[..., 208:210] = d
    elif gtype == "Q3_K":  # hmask[32], qs[64], scales[12], d
        b[..., 108:110] = d
    else:
        raise ValueError(gtype)
    return b.reshape(list(reversed(ne[1:])) + [nblocks * size])


def gg_tensor(name: str, gtype: str, ne: list[int], scale: float = 0.02, ones: bool = False) -> GgTensor:
    shape = list(reversed(ne))
    x = np.ones(shape, np.float32) if ones else randn(shape, scale)
    if gtype == "F32":
        return GgTensor(name, gtype, ne, x)
    if gtype == "F16":
        return GgTensor(name, gtype, ne, x.astype(np.float16))
    qtype = GGMLQuantizationType[gtype]
    if gtype in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        return GgTensor(name, gtype, ne, craft_kquant(gtype, ne), qtype)
    return GgTensor(name, gtype, ne, gguf.quants.quantize(x, qtype), qtype)


@dataclass
class GgKv:
    key: str
    vtype: str  # GGUFValueType name; arrays as "ARRAY[SUBTYPE]"
    value: Any


def add_kv(w: GGUFWriter, kv: GgKv) -> None:
    if kv.vtype.startswith("ARRAY["):
        sub = GGUFValueType[kv.vtype[6:-1]]
        w.add_key_value(kv.key, list(kv.value), GGUFValueType.ARRAY, sub_type=sub)
    else:
        w.add_key_value(kv.key, kv.value, GGUFValueType[kv.vtype])


def tokenizer_kvs(vocab: int) -> list[GgKv]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(vocab - 3)]
    return [
        GgKv("tokenizer.ggml.model", "STRING", "llama"),
        GgKv("tokenizer.ggml.tokens", "ARRAY[STRING]", tokens),
        GgKv("tokenizer.ggml.scores", "ARRAY[FLOAT32]", [0.0] * vocab),
        GgKv("tokenizer.ggml.token_type", "ARRAY[INT32]", [2, 3, 3] + [6] * (vocab - 3)),
        GgKv("tokenizer.ggml.bos_token_id", "UINT32", 1),
        GgKv("tokenizer.ggml.eos_token_id", "UINT32", 2),
    ]


def llama_kvs(name: str, file_type: int, *, ctx: int, emb: int, blocks: int, ffn: int, heads: int,
              kv_heads: int, head_dim: int, vocab: int, extra: list[GgKv] | None = None) -> list[GgKv]:
    kvs = [
        GgKv("general.name", "STRING", name),
        GgKv("general.file_type", "UINT32", file_type),
        GgKv("general.quantization_version", "UINT32", 2),
        GgKv("llama.context_length", "UINT32", ctx),
        GgKv("llama.embedding_length", "UINT32", emb),
        GgKv("llama.block_count", "UINT32", blocks),
        GgKv("llama.feed_forward_length", "UINT32", ffn),
        GgKv("llama.attention.head_count", "UINT32", heads),
        GgKv("llama.attention.head_count_kv", "UINT32", kv_heads),
        GgKv("llama.attention.key_length", "UINT32", head_dim),
        GgKv("llama.attention.value_length", "UINT32", head_dim),
        GgKv("llama.rope.dimension_count", "UINT32", head_dim),
        GgKv("llama.rope.freq_base", "FLOAT32", 10000.0),
        GgKv("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        GgKv("llama.vocab_size", "UINT32", vocab),
    ]
    kvs += extra or []
    kvs += tokenizer_kvs(vocab)
    return kvs


@contextlib.contextmanager
def gguf_version(v: int) -> Iterator[None]:
    """GGUFWriter has no version option; its header writer reads the module constant."""
    saved = gguf.gguf_writer.GGUF_VERSION
    gguf.gguf_writer.GGUF_VERSION = v
    try:
        yield
    finally:
        gguf.gguf_writer.GGUF_VERSION = saved


def gg_write(path: Path, kvs: list[GgKv], tensors: list[GgTensor], *, alignment: int | None = None,
             split_max_tensors: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for kv in kvs:
        add_kv(w, kv)
    for t in tensors:
        assert t.data.nbytes == t.nbytes, (t.name, t.data.nbytes, t.nbytes)
        w.add_tensor(t.name, t.data, raw_dtype=t.raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gg_expected(version: int, kvs: list[GgKv], tensors: list[GgTensor], params_formula: int | None,
                alignment: int = GGUF_DEFAULT_ALIGNMENT, extra_kv_count: int = 0,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    by_type_bytes: dict[str, int] = {}
    by_type_elems: dict[str, int] = {}
    rows = []
    offset = 0
    for t in tensors:
        by_type_bytes[t.gtype] = by_type_bytes.get(t.gtype, 0) + t.nbytes
        by_type_elems[t.gtype] = by_type_elems.get(t.gtype, 0) + prod(t.ne)
        rows.append({"name": t.name, "type": t.gtype, "ne": t.ne, "shape": list(reversed(t.ne)),
                     "elements": prod(t.ne), "bytes": t.nbytes, "offset": offset})
        offset += pad(t.nbytes, alignment)
    params = sum(by_type_elems.values())
    if params_formula is not None:
        assert params == params_formula, (params, params_formula)
    exp: dict[str, Any] = {
        "format": "gguf",
        "version": version,
        "tensor_count": len(tensors),
        # +1: GGUFWriter always adds general.architecture itself.
        "kv_count": len(kvs) + 1 + extra_kv_count,
        "alignment": alignment,
        "bytes_by_type": dict(sorted(by_type_bytes.items())),
        "elements_by_type": dict(sorted(by_type_elems.items())),
        "total_bytes": sum(by_type_bytes.values()),
        "total_bytes_padded": offset,
        "params": params,
    }
    if params_formula is not None:
        exp["params_from_metadata_formula"] = params_formula
    if extra:
        exp.update(extra)
    exp["kv"] = [{"key": "general.architecture", "type": "STRING", "value": "llama"}] + [
        {"key": kv.key, "type": kv.vtype,
         "value": kv.value if not kv.vtype.startswith("ARRAY") else {"len": len(kv.value)}}
        for kv in kvs
    ]
    exp["tensors"] = rows
    return exp


def gg_verify(path: Path, exp: dict[str, Any]) -> dict[str, Any]:
    raw = path.read_bytes()
    magic, ver, n_tensors, n_kv = struct.unpack("<4sIQQ", raw[:24])
    assert magic == b"GGUF", path
    assert ver == exp["version"], (path, ver)
    assert n_tensors == exp["tensor_count"], (path, n_tensors)
    assert n_kv == exp["kv_count"], (path, n_kv, exp["kv_count"])
    r = GGUFReader(str(path))
    assert r.alignment == exp["alignment"], (path, r.alignment)
    kv_fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert len(kv_fields) == exp["kv_count"], (path, len(kv_fields))
    for kv in exp["kv"]:
        f = kv_fields[kv["key"]]
        if kv["type"].startswith("ARRAY["):
            assert f.types[0] == GGUFValueType.ARRAY and f.types[-1].name == kv["type"][6:-1], (kv, f.types)
            assert len(f.data) == kv["value"]["len"], kv
        else:
            assert [t.name for t in f.types] == [kv["type"]], (kv, f.types)
            got = f.contents()
            if isinstance(kv["value"], float):
                assert abs(float(got) - kv["value"]) <= 1e-6 * max(1.0, abs(kv["value"])), (kv, got)
            else:
                assert got == kv["value"], (kv, got)
    want = {t["name"]: t for t in exp["tensors"]}
    assert [t.name for t in r.tensors] == [t["name"] for t in exp["tensors"]], path
    for t in r.tensors:
        w = want[t.name]
        assert t.tensor_type.name == w["type"], (t.name, t.tensor_type.name)
        assert [int(x) for x in t.shape] == w["ne"], (t.name, t.shape, w["ne"])
        assert int(t.n_elements) == w["elements"], t.name
        assert int(t.n_bytes) == w["bytes"], (t.name, t.n_bytes, w["bytes"])
        assert int(t.data_offset) == r.data_offset + w["offset"], (t.name, t.data_offset)
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        assert deq.size == w["elements"] and np.isfinite(deq).all(), t.name
    assert len(raw) == r.data_offset + exp["total_bytes_padded"], (path, len(raw))
    return {"file_size": len(raw), "data_offset": int(r.data_offset)}


def make_gguf_q() -> tuple[list[GgKv], list[GgTensor], dict[str, Any]]:
    """Q4_K_M-like mix on a tiny llama (row length 256 so K-quants apply).
    head_dim 32 with 2 heads (key_length/value_length given explicitly), MQA."""
    h, ffn, L, a, kv, d, V = 256, 64, 2, 2, 1, 32, 128
    plan = {  # layer -> tensor -> type
        0: {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K", "attn_output": "Q5_0",
            "ffn_gate": "Q4_K", "ffn_up": "Q4_K", "ffn_down": "Q8_0"},
        1: {"attn_q": "Q4_0", "attn_k": "Q4_1", "attn_v": "F16", "attn_output": "BF16",
            "ffn_gate": "Q5_K", "ffn_up": "Q8_0", "ffn_down": "Q4_0"},
    }
    shapes = {"attn_q": [h, a * d], "attn_k": [h, kv * d], "attn_v": [h, kv * d],
              "attn_output": [a * d, h], "ffn_gate": [h, ffn], "ffn_up": [h, ffn], "ffn_down": [ffn, h]}
    ts = [gg_tensor("token_embd.weight", "Q4_K", [h, V])]
    for i in range(L):
        ts.append(gg_tensor(f"blk.{i}.attn_norm.weight", "F32", [h], ones=True))
        for key in ("attn_q", "attn_k", "attn_v", "attn_output"):
            ts.append(gg_tensor(f"blk.{i}.{key}.weight", plan[i][key], shapes[key]))
        ts.append(gg_tensor(f"blk.{i}.ffn_norm.weight", "F32", [h], ones=True))
        for key in ("ffn_gate", "ffn_up", "ffn_down"):
            ts.append(gg_tensor(f"blk.{i}.{key}.weight", plan[i][key], shapes[key]))
    ts.append(gg_tensor("output_norm.weight", "F32", [h], ones=True))
    ts.append(gg_tensor("output.weight", "Q6_K", [h, V]))
    kvs = llama_kvs("tiny-llama-q", int(gguf.LlamaFileType.MOSTLY_Q4_K_M), ctx=2048, emb=h, blocks=L,
                    ffn=ffn, heads=a, kv_heads=kv, head_dim=d, vocab=V)
    formula = llama_formula_params(dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv, vocab=V), d, tied=False)
    return kvs, ts, {"formula": formula, "hparams": dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv,
                                                        head_dim=d, vocab=V)}


def make_gguf_moe() -> tuple[list[GgKv], list[GgTensor], dict[str, Any]]:
    """Mixtral-style MoE under the llama architecture: 3-D expert tensors in MXFP4 /
    Q8_0 (MXFP4_MOE-like), F32 router, custom general.alignment = 64."""
    h, ffn, L, a, kv, E, k, V = 64, 64, 2, 4, 2, 4, 2, 64
    d = h // a
    ts = [gg_tensor("token_embd.weight", "F16", [h, V])]
    for i in range(L):
        ts += [
            gg_tensor(f"blk.{i}.attn_norm.weight", "F32", [h], ones=True),
            gg_tensor(f"blk.{i}.attn_q.weight", "Q8_0", [h, a * d]),
            gg_tensor(f"blk.{i}.attn_k.weight", "Q8_0", [h, kv * d]),
            gg_tensor(f"blk.{i}.attn_v.weight", "Q8_0", [h, kv * d]),
            gg_tensor(f"blk.{i}.attn_output.weight", "Q8_0", [a * d, h]),
            gg_tensor(f"blk.{i}.ffn_norm.weight", "F32", [h], ones=True),
            gg_tensor(f"blk.{i}.ffn_gate_inp.weight", "F32", [h, E]),
            gg_tensor(f"blk.{i}.ffn_gate_exps.weight", "MXFP4", [h, ffn, E]),
            gg_tensor(f"blk.{i}.ffn_up_exps.weight", "MXFP4", [h, ffn, E]),
            gg_tensor(f"blk.{i}.ffn_down_exps.weight", "Q8_0", [ffn, h, E]),
        ]
    ts.append(gg_tensor("output_norm.weight", "F32", [h], ones=True))
    ts.append(gg_tensor("output.weight", "Q8_0", [h, V]))
    kvs = llama_kvs("tiny-moe", int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE), ctx=2048, emb=h, blocks=L, ffn=ffn,
                    heads=a, kv_heads=kv, head_dim=d, vocab=V,
                    extra=[GgKv("llama.expert_count", "UINT32", E), GgKv("llama.expert_used_count", "UINT32", k)])
    dense = llama_formula_params(dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv, vocab=V), d, tied=False)
    # DOMAIN.md 2.2: MoE layer MLP = E*3*h*I + router h*E (replacing the dense 3*h*I).
    formula = dense + L * (E * 3 * h * ffn + h * E - 3 * h * ffn)
    return kvs, ts, {"formula": formula, "hparams": dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv,
                                                        head_dim=d, vocab=V, experts=E, experts_used=k)}


def make_gguf_small(name: str) -> tuple[list[GgKv], list[GgTensor], dict[str, Any]]:
    """Very small llama (F32 / F16 / Q8_0) for the v2 and split fixtures."""
    h, ffn, L, a, kv, V = 32, 32, 1, 2, 1, 32
    d = h // a
    ts = [gg_tensor("token_embd.weight", "F16", [h, V])]
    for i in range(L):
        ts += [
            gg_tensor(f"blk.{i}.attn_norm.weight", "F32", [h], ones=True),
            gg_tensor(f"blk.{i}.attn_q.weight", "Q8_0", [h, a * d]),
            gg_tensor(f"blk.{i}.attn_k.weight", "Q8_0", [h, kv * d]),
            gg_tensor(f"blk.{i}.attn_v.weight", "Q8_0", [h, kv * d]),
            gg_tensor(f"blk.{i}.attn_output.weight", "Q8_0", [a * d, h]),
            gg_tensor(f"blk.{i}.ffn_norm.weight", "F32", [h], ones=True),
            gg_tensor(f"blk.{i}.ffn_gate.weight", "F16", [h, ffn]),
            gg_tensor(f"blk.{i}.ffn_up.weight", "F16", [h, ffn]),
            gg_tensor(f"blk.{i}.ffn_down.weight", "Q8_0", [ffn, h]),
        ]
    ts.append(gg_tensor("output_norm.weight", "F32", [h], ones=True))
    ts.append(gg_tensor("output.weight", "F16", [h, V]))
    kvs = llama_kvs(name, int(gguf.LlamaFileType.MOSTLY_Q8_0), ctx=512, emb=h, blocks=L, ffn=ffn,
                    heads=a, kv_heads=kv, head_dim=d, vocab=V)
    formula = llama_formula_params(dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv, vocab=V), d, tied=False)
    return kvs, ts, {"formula": formula, "hparams": dict(hidden=h, ffn=ffn, layers=L, heads=a, kv_heads=kv,
                                                        head_dim=d, vocab=V)}


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------


def rel(p: Path) -> str:
    return p.relative_to(OUT).as_posix()


def main() -> int:
    # Cross-check the hand-typed ggml table against the package (a mismatch means
    # DOMAIN.md 1.5 and gguf-py disagree; stop and look).
    for name, (block, size) in GGML_BLOCK.items():
        assert gguf.GGML_QUANT_SIZES[GGMLQuantizationType[name]] == (block, size), name

    OUT.mkdir(parents=True, exist_ok=True)
    # Only generated files are removed; configs/ (copied real configs) is left alone.
    for p in ["sharded", "split"]:
        shutil.rmtree(OUT / p, ignore_errors=True)
    for p in OUT.glob("*"):
        if p.is_file() and (p.suffix in (".safetensors", ".gguf") or p.name.endswith(".config.json")
                            or p.name == "expected.json"):
            p.unlink()

    files: dict[str, Any] = {}

    # --- safetensors single files ---
    single = [
        ("tiny-llama.safetensors", make_tiny_llama,
         ("tiny-llama.config.json", llama_hf_config("bfloat16", tied=False))),
        ("tiny-llama-gptq.safetensors", make_gptq,
         ("tiny-llama-gptq.config.json", llama_hf_config("float16", tied=False, extra={
             "quantization_config": {"bits": 4, "desc_act": False, "group_size": 32,
                                     "quant_method": "gptq", "sym": True}}))),
        ("tiny-llama-fp8.safetensors", make_fp8,
         ("tiny-llama-fp8.config.json", llama_hf_config("bfloat16", tied=False, extra={
             "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                     "quant_method": "fp8", "weight_block_size": [128, 128]}}))),
        ("tiny-gptoss-mxfp4.safetensors", make_gptoss_mxfp4,
         ("tiny-gptoss-mxfp4.config.json", {
             "architectures": ["GptOssForCausalLM"], "attention_bias": True,
             "experts_per_token": GPTOSS["top_k"], "head_dim": GPTOSS["head_dim"], "hidden_act": "silu",
             "hidden_size": GPTOSS["hidden"], "intermediate_size": GPTOSS["inter"],
             "layer_types": ["sliding_attention", "full_attention"][: GPTOSS["layers"]],
             "max_position_embeddings": 4096, "model_type": "gpt_oss",
             "num_attention_heads": GPTOSS["heads"], "num_experts_per_tok": GPTOSS["top_k"],
             "num_hidden_layers": GPTOSS["layers"], "num_key_value_heads": GPTOSS["kv_heads"],
             "num_local_experts": GPTOSS["experts"],
             "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                                "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"],
                                     "quant_method": "mxfp4"},
             "rms_norm_eps": 1e-05, "sliding_window": 128, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "vocab_size": GPTOSS["vocab"]})),
        ("dtypes.safetensors", make_dtype_sampler, None),
    ]
    for fname, maker, companion in single:
        ts, meta, exp = maker()
        path = OUT / fname
        st_write(path, ts, meta)
        exp["observed"] = st_verify(path, exp)
        files[fname] = exp
        if companion:
            write_config(OUT / companion[0], companion[1])

    # --- sharded safetensors ---
    sh = make_sharded()
    for name, (shard, meta) in sh["entries"].items():
        exp = st_expected(shard, meta, sum(prod(t.shape) for t in shard))
        exp["observed"] = st_verify(OUT / name, exp)
        files[name] = exp
    index = json.loads((OUT / "sharded" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sh["total_size"]
    assert sum(files[n]["total_bytes"] for n in sh["entries"]) == sh["total_size"]
    files["sharded/model.safetensors.index.json"] = {
        "format": "safetensors-index",
        "shard_count": sh["shard_count"],
        "total_size": sh["total_size"],
        "weight_map_entries": sh["weight_map_len"],
        "params": sh["params"],
        "params_from_config_formula": llama_formula_params(LLAMA, LLAMA_HEAD_DIM, tied=True),
        "tie_word_embeddings": True,
        "companion_config": "sharded/config.json",
    }

    # --- GGUF ---
    kvs, ts, info = make_gguf_q()
    path = OUT / "tiny-llama-q.gguf"
    gg_write(path, kvs, ts)
    exp = gg_expected(3, kvs, ts, info["formula"], extra={"hparams": info["hparams"]})
    exp["observed"] = gg_verify(path, exp)
    files[rel(path)] = exp

    kvs, ts, info = make_gguf_moe()
    path = OUT / "tiny-moe.gguf"
    gg_write(path, kvs, ts, alignment=64)
    exp = gg_expected(3, kvs, ts, info["formula"], alignment=64, extra_kv_count=1,
                      extra={"hparams": info["hparams"],
                             "note": "general.alignment = 64 (UINT32) is set; tensor data start and "
                                     "every tensor are padded to 64 bytes"})
    exp["kv"].insert(1, {"key": "general.alignment", "type": "UINT32", "value": 64})
    exp["observed"] = gg_verify(path, exp)
    files[rel(path)] = exp

    kvs, ts, info = make_gguf_small("tiny-llama-v2")
    path = OUT / "tiny-llama-v2.gguf"
    with gguf_version(2):
        gg_write(path, kvs, ts)
    exp = gg_expected(2, kvs, ts, info["formula"], extra={
        "hparams": info["hparams"],
        "note": "written by GGUFWriter with gguf.gguf_writer.GGUF_VERSION patched to 2 (the writer "
                "has no version option); v2 and v3 little-endian layouts are identical, v3 only "
                "added big-endian support"})
    exp["observed"] = gg_verify(path, exp)
    files[rel(path)] = exp

    # split GGUF (gguf-split layout: split.no / split.count / split.tensors.count;
    # model KVs only in the first shard)
    kvs, ts, info = make_gguf_small("tiny-llama-split")
    n_split = 2
    per = math.ceil(len(ts) / n_split)
    path = OUT / "split" / "tiny-llama-split.gguf"
    gg_write(path, kvs, ts, split_max_tensors=per)
    total = {"params": 0, "total_bytes": 0}
    for k in range(n_split):
        part = ts[k * per:(k + 1) * per]
        shard_path = path.with_name(f"tiny-llama-split-{k + 1:05d}-of-{n_split:05d}.gguf")
        split_kvs = [GgKv("split.no", "UINT16", k), GgKv("split.count", "UINT16", n_split),
                     GgKv("split.tensors.count", "INT32", len(ts))]
        if k == 0:
            exp = gg_expected(3, kvs + split_kvs, part, None)
        else:
            exp = gg_expected(3, split_kvs, part, None, extra_kv_count=-1)
            exp["kv"] = exp["kv"][1:]  # no general.architecture in later shards
        exp["observed"] = gg_verify(shard_path, exp)
        files[rel(shard_path)] = exp
        total["params"] += exp["params"]
        total["total_bytes"] += exp["total_bytes"]
    assert total["params"] == info["formula"]
    files["split/"] = {"format": "gguf-split", "shard_count": n_split, "tensor_count": len(ts),
                       "params": total["params"], "params_from_metadata_formula": info["formula"],
                       "total_bytes": total["total_bytes"], "hparams": info["hparams"]}

    for name, exp in files.items():
        size = exp.get("observed", {}).get("file_size")
        assert size is None or size < 300_000, (name, size)

    expected = {
        "generator": {
            "script": "tools/make-import-fixtures.py",
            "python": platform.python_version(),
            "packages": {p: pkg_version(p) for p in ("numpy", "safetensors", "gguf")},
        },
        "conventions": {
            "params": "number of model weights. Plain tensors: product of the shape. Packed "
                      "quantized checkpoints (GPTQ, MXFP4 blocks): the unpacked weight count; scale, "
                      "zero-point, g_idx and weight_scale_inv tensors are not counted. GGUF: sum of "
                      "tensor element counts (ne product).",
            "bytes": "safetensors: shape product x element size (F4 = 4 bits); GGUF: "
                     "ceil(elements / block) x bytes_per_block (DOMAIN.md 1.5). total_bytes_padded "
                     "adds the per-tensor alignment padding of the GGUF data section.",
            "gguf_ne": "ne is the GGUF on-disk dimension order (ne[0] = row length); shape is ne reversed.",
            "observed": "values under 'observed' were read from the written file (they depend on "
                        "header serialization); everything else is computed from shapes and was "
                        "checked against safetensors.safe_open / a raw header parse and gguf.GGUFReader.",
        },
        "files": files,
    }
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    for name, exp in files.items():
        size = exp.get("observed", {}).get("file_size")
        print(f"{name:55s} {size if size is not None else '':>8} params={exp.get('params')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
