//! The cgroup v2 device program that decides as a [`DevicePolicy`] does.

use super::bpf::{Insn, Reg, CTX_ACCESS_TYPE, CTX_MAJOR, CTX_MINOR};
use super::{Access, DevicePolicy};

impl DevicePolicy {
    /// The device program deciding as [`DevicePolicy::permits`] does: one block per
    /// exception, which returns the exception's action when the context matches it, then
    /// the default.
    pub fn program(&self) -> Vec<Insn> {
        let mut insns = vec![
            // r2 = type (low half of access_type), r3 = access (high half).
            Insn::load_word(Reg::R2, Reg::R1, CTX_ACCESS_TYPE),
            Insn::and_imm(Reg::R2, 0xffff),
            Insn::load_word(Reg::R3, Reg::R1, CTX_ACCESS_TYPE),
            Insn::rsh_imm(Reg::R3, 16),
            Insn::load_word(Reg::R4, Reg::R1, CTX_MAJOR),
            Insn::load_word(Reg::R5, Reg::R1, CTX_MINOR),
        ];
        let (on_match, otherwise) = if self.default_allow { (0, 1) } else { (1, 0) };
        for (pattern, access) in &self.exceptions {
            let mut block = vec![Step::SkipUnlessEq(Reg::R2, pattern.kind.bpf_type())];
            let bits = i32::from(access.bits());
            if self.default_allow {
                // A deny exception applies when it shares an access with the request.
                block.push(Step::Do(Insn::mov_reg(Reg::R1, Reg::R3)));
                block.push(Step::Do(Insn::and_imm(Reg::R1, bits)));
                block.push(Step::SkipIfZero(Reg::R1));
            } else if *access != Access::ALL {
                // An allow exception applies when it covers the whole request.
                block.push(Step::Do(Insn::mov_reg(Reg::R1, Reg::R3)));
                block.push(Step::Do(Insn::and_imm(Reg::R1, bits)));
                block.push(Step::SkipUnlessSame(Reg::R1, Reg::R3));
            }
            if let Some(major) = pattern.major {
                block.push(Step::SkipUnlessEq(Reg::R4, imm(major)));
            }
            if let Some(minor) = pattern.minor {
                block.push(Step::SkipUnlessEq(Reg::R5, imm(minor)));
            }
            block.push(Step::Do(Insn::mov_imm(Reg::R0, on_match)));
            block.push(Step::Do(Insn::exit()));
            let len = block.len();
            insns.extend(block.into_iter().enumerate().map(|(i, step)| {
                // A failed test jumps to the next block: past the rest of this one.
                let skip = i16::try_from(len - i - 1).unwrap_or(i16::MAX);
                match step {
                    Step::Do(insn) => insn,
                    Step::SkipUnlessEq(reg, value) => Insn::jne_imm(reg, value, skip),
                    Step::SkipUnlessSame(a, b) => Insn::jne_reg(a, b, skip),
                    Step::SkipIfZero(reg) => Insn::jeq_imm(reg, 0, skip),
                }
            }));
        }
        insns.push(Insn::mov_imm(Reg::R0, otherwise));
        insns.push(Insn::exit());
        insns
    }
}

/// An instruction of a program block whose jumps go to the end of the block.
enum Step {
    Do(Insn),
    SkipUnlessEq(Reg, i32),
    SkipUnlessSame(Reg, Reg),
    SkipIfZero(Reg),
}

fn imm(n: u32) -> i32 {
    // Checked by DevicePolicy::from_rules.
    i32::try_from(n).unwrap_or(i32::MAX)
}
