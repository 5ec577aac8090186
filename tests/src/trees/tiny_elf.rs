//! Tiny ELF files (a few hundred bytes) with the class, machine, type and `DT_SONAME` of
//! the ones gcc builds: what the committed trees hold instead of real libraries, so that
//! no toolchain changes their bytes.

use libnvc::elf::{self, ElfClass};

/// Little-endian ELF fields of one class.
struct ElfWriter {
    bytes: Vec<u8>,
    wide: bool,
}

impl ElfWriter {
    fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    /// An address, offset or size: 8 bytes in ELF64, 4 in ELF32. Tiny files only, so
    /// every value fits.
    fn word(&mut self, v: usize) {
        if self.wide {
            self.bytes.extend_from_slice(&(v as u64).to_le_bytes());
        } else {
            self.bytes.extend_from_slice(&(v as u32).to_le_bytes());
        }
    }

    fn ident_and_header(&mut self, elf_type: u16, machine: u16, entry: usize, phnum: u16) {
        let (ehsize, phentsize, shentsize) = if self.wide {
            (64, 56, 64)
        } else {
            (52, 32, 40)
        };
        self.bytes.extend_from_slice(b"\x7fELF");
        self.u8(if self.wide { 2 } else { 1 }); // EI_CLASS
        self.u8(1); // EI_DATA: little-endian
        self.u8(1); // EI_VERSION
        self.bytes.extend_from_slice(&[0; 9]); // EI_OSABI (SysV), EI_ABIVERSION, padding
        self.u16(elf_type);
        self.u16(machine);
        self.u32(1); // e_version
        self.word(entry);
        self.word(usize::from(ehsize)); // e_phoff: right after the header
        self.word(0); // e_shoff: no section header
        self.u32(0); // e_flags
        self.u16(ehsize);
        self.u16(phentsize);
        self.u16(phnum);
        self.u16(shentsize);
        self.u16(0); // e_shnum
        self.u16(0); // e_shstrndx
    }

    #[allow(clippy::too_many_arguments)]
    fn program_header(
        &mut self,
        kind: u32,
        flags: u32,
        offset: usize,
        vaddr: usize,
        size: usize,
        align: usize,
    ) {
        self.u32(kind);
        if self.wide {
            self.u32(flags);
        }
        self.word(offset);
        self.word(vaddr);
        self.word(vaddr); // p_paddr
        self.word(size); // p_filesz
        self.word(size); // p_memsz
        if !self.wide {
            self.u32(flags);
        }
        self.word(align);
    }
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
const DT_NULL: usize = 0;
const DT_NEEDED: usize = 1;
const DT_STRTAB: usize = 5;
const DT_SYMTAB: usize = 6;
const DT_STRSZ: usize = 10;
const DT_SYMENT: usize = 11;
const DT_SONAME: usize = 14;

/// A minimal ELF shared object (x86-64 for [`ElfClass::Elf64`], i386 for
/// [`ElfClass::Elf32`]) that ldconfig, readelf and `libnvc::elf` read like a real one: one
/// `PT_LOAD` segment holding a `PT_DYNAMIC` with `DT_NEEDED libc.so.6` (as the driver's
/// libraries have; ldconfig files a 32-bit library without it as plain ELF), `DT_SONAME
/// soname`, an empty symbol table and the strings, `note` the last of them. A few hundred
/// bytes; it cannot be loaded.
pub fn tiny_shared_object(class: ElfClass, soname: &str, note: &str) -> Vec<u8> {
    let wide = class == ElfClass::Elf64;
    let (ehsize, phentsize, dynent, syment) = if wide {
        (64, 56, 16, 24)
    } else {
        (52, 32, 8, 16)
    };
    let machine = if wide { elf::EM_X86_64 } else { elf::EM_386 };
    let mut strings = vec![0u8];
    let needed = strings.len();
    strings.extend_from_slice(b"libc.so.6\0");
    let soname_at = strings.len();
    strings.extend_from_slice(soname.as_bytes());
    strings.push(0);
    strings.extend_from_slice(note.as_bytes());
    strings.push(0);

    let dynamic_at = ehsize + 2 * phentsize;
    let dynamic_len = 7 * dynent;
    let symtab_at = dynamic_at + dynamic_len;
    let strtab_at = symtab_at + syment;
    let total = strtab_at + strings.len();

    let mut w = ElfWriter {
        bytes: Vec::with_capacity(total),
        wide,
    };
    w.ident_and_header(elf::ET_DYN, machine, 0, 2);
    w.program_header(PT_LOAD, PF_R | PF_W, 0, 0, total, 0x1000);
    w.program_header(
        PT_DYNAMIC,
        PF_R | PF_W,
        dynamic_at,
        dynamic_at,
        dynamic_len,
        if wide { 8 } else { 4 },
    );
    for (tag, value) in [
        (DT_NEEDED, needed),
        (DT_SONAME, soname_at),
        (DT_STRTAB, strtab_at),
        (DT_STRSZ, strings.len()),
        (DT_SYMTAB, symtab_at),
        (DT_SYMENT, syment),
        (DT_NULL, 0),
    ] {
        w.word(tag);
        w.word(value);
    }
    w.bytes.resize(strtab_at, 0); // the null symbol
    w.bytes.extend_from_slice(&strings);
    w.bytes
}

/// A minimal static x86-64 executable (`ET_EXEC`) that writes `message` to stdout and exits
/// 0: a driver program discovery takes for real (an ELF program with execute bits), a
/// couple of hundred bytes.
pub fn tiny_program(message: &str) -> Vec<u8> {
    const BASE: usize = 0x40_0000;
    let code_at = 64 + 56;
    // write(1, message, len); exit(0). The lea's rip-relative offset is from its end (byte
    // 17 of the code) to the message, right after the code's 33 bytes.
    let len = u32::try_from(message.len()).unwrap_or(0).to_le_bytes();
    let mut code = vec![
        0xb8, 1, 0, 0, 0, // mov eax, 1 (write)
        0xbf, 1, 0, 0, 0, // mov edi, 1 (stdout)
        0x48, 0x8d, 0x35, 16, 0, 0, 0, // lea rsi, [rip + 16]
        0xba, len[0], len[1], len[2], len[3], // mov edx, len
        0x0f, 0x05, // syscall
        0xb8, 60, 0, 0, 0, // mov eax, 60 (exit)
        0x31, 0xff, // xor edi, edi
        0x0f, 0x05, // syscall
    ];
    code.extend_from_slice(message.as_bytes());
    let total = code_at + code.len();
    let mut w = ElfWriter {
        bytes: Vec::with_capacity(total),
        wide: true,
    };
    w.ident_and_header(elf::ET_EXEC, elf::EM_X86_64, BASE + code_at, 1);
    w.program_header(PT_LOAD, PF_R | PF_X, 0, BASE, total, 0x1000);
    w.bytes.extend_from_slice(&code);
    w.bytes
}
