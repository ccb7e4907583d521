"""Which gfx1100 instructions the interpreter executes, per encoding, against the full opcode tables: the list of
unsupported instructions for the docs and the closing report (`python -m tiny_amd.emulator.coverage`)."""
from __future__ import annotations

from tiny_amd.emulator import memory_ops, packed, rdna3_opcodes, rdna3, salu, valu_ops, vector

LANE_OPS = {"v_nop", "v_pipeflush", "v_readfirstlane_b32", "v_readlane_b32", "v_writelane_b32", "v_mbcnt_lo_u32_b32",
            "v_mbcnt_hi_u32_b32", "v_swap_b32"}
SOP1_OPS = {"s_mov_b32", "s_mov_b64", "s_cmov_b32", "s_cmov_b64", "s_getpc_b64", "s_setpc_b64", "s_swappc_b64",
            "s_not_b32", "s_not_b64", "s_abs_i32", "s_bcnt1_i32_b32", "s_bcnt1_i32_b64", "s_bcnt0_i32_b32",
            "s_bcnt0_i32_b64", "s_sext_i32_i8", "s_sext_i32_i16", "s_ctz_i32_b32", "s_ctz_i32_b64", "s_clz_i32_u32",
            "s_clz_i32_u64", "s_brev_b32", "s_brev_b64", "s_cls_i32", "s_bitset0_b32", "s_bitset0_b64",
            "s_bitset1_b32", "s_bitset1_b64"}
SOPK_OPS = {"s_movk_i32", "s_cmovk_i32", "s_addk_i32", "s_mulk_i32", "s_getreg_b32", "s_setreg_b32",
            "s_setreg_imm32_b32", "s_version", "s_call_b64"}
SOPP_OPS = rdna3.SOPP_NOPS | {"s_barrier", "s_endpgm", "s_branch", "s_cbranch_scc0", "s_cbranch_scc1",
                              "s_cbranch_vccz", "s_cbranch_vccnz", "s_cbranch_execz", "s_cbranch_execnz"}
DS_SIMPLE = {"ds_nop", "ds_bpermute_b32", "ds_permute_b32", "ds_load_2addr_b32", "ds_load_2addr_stride64_b32",
             "ds_load_2addr_b64", "ds_load_2addr_stride64_b64", "ds_store_2addr_b32", "ds_store_2addr_stride64_b32",
             "ds_store_2addr_b64", "ds_store_2addr_stride64_b64", "ds_store_b8_d16_hi", "ds_store_b16_d16_hi"}


def is_supported(fmt: str, name: str) -> bool:
  if fmt in ("VOP1", "VOP2", "VOPC", "VOP3"): return name in valu_ops.VOP or name in LANE_OPS
  if fmt == "VOP3P": return name in packed.PACKED or name.startswith("v_fma_mix") or name == "v_dot2_f32_f16"
  if fmt in ("VOPD_X", "VOPD_Y"): return name in vector.VOPD_OPS or name in vector.VOPD_INT_OPS
  if fmt == "SOP2": return name in salu.SOP2
  if fmt == "SOP1": return name in SOP1_OPS or "saveexec_b32" in name or "wrexec_b32" in name
  if fmt == "SOPC": return True
  if fmt == "SOPK": return name in SOPK_OPS or name.startswith("s_cmpk_") or name.startswith("s_waitcnt")
  if fmt == "SOPP": return name in SOPP_OPS
  if fmt == "SMEM": return name.startswith("s_load_") or name in ("s_dcache_inv", "s_gl1_inv")
  if fmt == "DS":
    if name in DS_SIMPLE: return True
    op = name[3:]
    if op.startswith("load_"): return op[5:] in memory_ops.LOAD_WIDTH
    if op.startswith("store_"): return op[6:] in memory_ops.STORE_WIDTH
    return op.replace("_rtn", "") in memory_ops.DS_ATOMIC
  if fmt in ("GLOBAL", "FLAT", "SCRATCH"):
    op = name.split("_", 1)[1]
    if op.startswith("load_d16"): return op[9:].removeprefix("hi_") in ("b16", "u8", "i8")
    if op.startswith("load_"): return op[5:] in memory_ops.LOAD_WIDTH
    if op.startswith("store_d16_hi"): return True
    if op.startswith("store_"): return op[6:] in memory_ops.STORE_WIDTH
    if op.startswith("atomic_"):
      return fmt != "SCRATCH" and (op[7:].removesuffix("_rtn") in memory_ops.ATOMIC_FN or "cmpswap_b32" in op)
  return False


def unsupported() -> dict[str, list[str]]:
  """Encoding -> mnemonics the interpreter does not execute (sorted)."""
  out = {}
  for fmt in ("SOP1", "SOP2", "SOPK", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD_X",
              "VOPD_Y", "DS", "GLOBAL", "FLAT", "SCRATCH"):
    names = sorted({n for n in getattr(rdna3_opcodes, fmt).values() if not is_supported(fmt, n)})
    if names: out[fmt] = names
  return out


def main() -> None:
  total = sum(len(set(getattr(rdna3_opcodes, f).values())) for f in ("SOP1", "SOP2", "SOPK", "SOPC", "SOPP", "SMEM",
              "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD_X", "VOPD_Y", "DS", "GLOBAL", "FLAT", "SCRATCH"))
  missing = unsupported()
  print(f"gfx1100 mnemonics (per encoding): {total}; not executed: {sum(len(v) for v in missing.values())}")
  for fmt, names in missing.items(): print(f"{fmt}: {' '.join(names)}")


if __name__ == "__main__":
  main()
