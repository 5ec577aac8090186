//! eBPF device programs as data: the instructions a cgroup v2 device program is made of,
//! encoded as the kernel's `struct bpf_insn`, and read back for tests and logs. Loading and
//! attaching them is nvc-host's (`nvc_host::cgroup`).

/// Device types in a device program's context (`BPF_DEVCG_DEV_*`): the low 16 bits of
/// `access_type`.
pub const DEV_BLOCK: i32 = 1;
/// A character device (`BPF_DEVCG_DEV_CHAR`).
pub const DEV_CHAR: i32 = 2;
/// Access bits in a device program's context (`BPF_DEVCG_ACC_*`): the high 16 bits of
/// `access_type`. mknod(2).
pub const ACC_MKNOD: i32 = 1;
/// Opening for reading.
pub const ACC_READ: i32 = 2;
/// Opening for writing.
pub const ACC_WRITE: i32 = 4;

/// Offsets of the fields of `struct bpf_cgroup_dev_ctx`, the one argument (r1) of a device
/// program: `access_type` (`access << 16 | type`), `major`, `minor`, each a `u32`.
pub const CTX_ACCESS_TYPE: i16 = 0;
/// Offset of `major`.
pub const CTX_MAJOR: i16 = 4;
/// Offset of `minor`.
pub const CTX_MINOR: i16 = 8;

/// The most instructions a device program may have: the kernel's limit for programs loaded
/// without `CAP_SYS_ADMIN`, far more than any spec's rules need.
pub const MAX_INSNS: usize = 4096;

/// One eBPF instruction, laid out as the kernel's `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// An eBPF register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// The return value.
    R0 = 0,
    /// The first argument: for device programs, the context pointer.
    R1 = 1,
    /// Scratch.
    R2 = 2,
    /// Scratch.
    R3 = 3,
    /// Scratch.
    R4 = 4,
    /// Scratch.
    R5 = 5,
}

// Instruction classes, operations and sources (include/uapi/linux/bpf_common.h, bpf.h).
const CLASS_LDX: u8 = 0x01;
const CLASS_ALU: u8 = 0x04;
const CLASS_JMP: u8 = 0x05;
const MODE_MEM: u8 = 0x60;
const SIZE_W: u8 = 0x00;
const SRC_K: u8 = 0x00;
const SRC_X: u8 = 0x08;
const ALU_AND: u8 = 0x50;
const ALU_RSH: u8 = 0x70;
const ALU_MOV: u8 = 0xb0;
const JMP_JA: u8 = 0x00;
const JMP_JEQ: u8 = 0x10;
const JMP_JNE: u8 = 0x50;
const JMP_EXIT: u8 = 0x90;

/// What an [`Insn`] does, for reading programs back (tests, logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `dst = *(u32 *)(src + off)`.
    LoadWord,
    /// `dst = imm` (32-bit, zero-extended).
    MovImm,
    /// `dst = src` (32-bit).
    MovReg,
    /// `dst &= imm` (32-bit).
    AndImm,
    /// `dst >>= imm` (32-bit, logical).
    RshImm,
    /// `if dst == imm goto +off`.
    JeqImm,
    /// `if dst != imm goto +off`.
    JneImm,
    /// `if dst != src goto +off`.
    JneReg,
    /// `goto +off`.
    Ja,
    /// Return r0.
    Exit,
}

impl Insn {
    const fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
        // struct bpf_insn has `__u8 dst_reg:4, src_reg:4`: dst in the low nibble on
        // little-endian targets, the high one on big-endian targets.
        let regs = if cfg!(target_endian = "little") {
            (dst as u8) | ((src as u8) << 4)
        } else {
            ((dst as u8) << 4) | (src as u8)
        };
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }

    /// `dst = *(u32 *)(src + off)`.
    pub const fn load_word(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(CLASS_LDX | MODE_MEM | SIZE_W, dst, src, off, 0)
    }

    /// `dst = imm` (32-bit).
    pub const fn mov_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(CLASS_ALU | ALU_MOV | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `dst = src` (32-bit).
    pub const fn mov_reg(dst: Reg, src: Reg) -> Insn {
        Insn::new(CLASS_ALU | ALU_MOV | SRC_X, dst, src, 0, 0)
    }

    /// `dst &= imm` (32-bit).
    pub const fn and_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(CLASS_ALU | ALU_AND | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `dst >>= imm` (32-bit).
    pub const fn rsh_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(CLASS_ALU | ALU_RSH | SRC_K, dst, Reg::R0, 0, imm)
    }

    /// `if dst == imm goto +off`.
    pub const fn jeq_imm(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(CLASS_JMP | JMP_JEQ | SRC_K, dst, Reg::R0, off, imm)
    }

    /// `if dst != imm goto +off`.
    pub const fn jne_imm(dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(CLASS_JMP | JMP_JNE | SRC_K, dst, Reg::R0, off, imm)
    }

    /// `if dst != src goto +off`.
    pub const fn jne_reg(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(CLASS_JMP | JMP_JNE | SRC_X, dst, src, off, 0)
    }

    /// `goto +off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(CLASS_JMP | JMP_JA, Reg::R0, Reg::R0, off, 0)
    }

    /// Return r0.
    pub const fn exit() -> Insn {
        Insn::new(CLASS_JMP | JMP_EXIT, Reg::R0, Reg::R0, 0, 0)
    }

    /// What the instruction does; `None` for an opcode this module does not emit.
    pub fn op(&self) -> Option<Op> {
        Some(match self.code {
            c if c == CLASS_LDX | MODE_MEM | SIZE_W => Op::LoadWord,
            c if c == CLASS_ALU | ALU_MOV | SRC_K => Op::MovImm,
            c if c == CLASS_ALU | ALU_MOV | SRC_X => Op::MovReg,
            c if c == CLASS_ALU | ALU_AND | SRC_K => Op::AndImm,
            c if c == CLASS_ALU | ALU_RSH | SRC_K => Op::RshImm,
            c if c == CLASS_JMP | JMP_JEQ | SRC_K => Op::JeqImm,
            c if c == CLASS_JMP | JMP_JNE | SRC_K => Op::JneImm,
            c if c == CLASS_JMP | JMP_JNE | SRC_X => Op::JneReg,
            c if c == CLASS_JMP | JMP_JA => Op::Ja,
            c if c == CLASS_JMP | JMP_EXIT => Op::Exit,
            _ => return None,
        })
    }

    /// The destination register number.
    pub fn dst(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs & 0x0f
        } else {
            self.regs >> 4
        }
    }

    /// The source register number.
    pub fn src(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs >> 4
        } else {
            self.regs & 0x0f
        }
    }

    /// The offset: a jump's distance (from the next instruction) or a load's displacement.
    pub fn off(&self) -> i16 {
        self.off
    }

    /// The immediate operand.
    pub fn imm(&self) -> i32 {
        self.imm
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_lays_them_out() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // Opcodes and register nibbles as include/uapi/linux/bpf.h encodes them.
        let cases = [
            (Insn::load_word(Reg::R2, Reg::R1, 0), 0x61, 0x12),
            (Insn::mov_imm(Reg::R0, 1), 0xb4, 0x00),
            (Insn::mov_reg(Reg::R1, Reg::R3), 0xbc, 0x31),
            (Insn::and_imm(Reg::R2, 0xffff), 0x54, 0x02),
            (Insn::rsh_imm(Reg::R3, 16), 0x74, 0x03),
            (Insn::jne_imm(Reg::R4, 195, 3), 0x55, 0x04),
            (Insn::jeq_imm(Reg::R1, 0, 3), 0x15, 0x01),
            (Insn::jne_reg(Reg::R1, Reg::R3, 2), 0x5d, 0x31),
            (Insn::ja(1), 0x05, 0x00),
            (Insn::exit(), 0x95, 0x00),
        ];
        for (insn, code, regs) in cases {
            assert_eq!((insn.code, insn.regs), (code, regs), "{insn:?}");
            assert!(insn.op().is_some(), "{insn:?}");
        }
        let j = Insn::jne_reg(Reg::R1, Reg::R3, -2);
        assert_eq!((j.dst(), j.src(), j.off()), (1, 3, -2));
    }
}
