//! A small, bounded ELF reader: just enough of a shared object's headers to tell its
//! class, machine, type and `DT_SONAME`, which is what discovery needs to check a driver
//! library or binary and what an ld.so.cache entry records.
//!
//! It reads from a reader ([`read_elf_info`]) or a file its caller opened
//! ([`read_elf_info_file`], with [`HostProbe::open`](crate::probe::HostProbe::open)); it
//! never opens a file itself. Files may come from a container image, so every offset is
//! checked, every read has a fixed upper bound and a malformed file gives an
//! [`ElfError`], never a panic or a large allocation.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod arch;

pub use arch::{describe, Arch};

/// `e_machine` of x86-64 objects.
pub const EM_X86_64: u16 = 62;
/// `e_machine` of i386 objects.
pub const EM_386: u16 = 3;
/// `e_machine` of AArch64 objects.
pub const EM_AARCH64: u16 = 183;
/// `e_type` of shared objects (and position-independent executables).
pub const ET_DYN: u16 = 3;
/// `e_type` of fixed-address executables.
pub const ET_EXEC: u16 = 2;

/// The most program headers read from one file.
pub const MAX_PROGRAM_HEADERS: u16 = 4096;
/// The longest soname read, terminating NUL included.
pub const MAX_STRING_LEN: usize = 4096;
/// The largest `PT_DYNAMIC` segment read, in bytes (4096 64-bit entries).
pub const MAX_DYNAMIC_SIZE: u64 = 64 * 1024;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_STRSZ: i64 = 10;
const DT_SONAME: i64 = 14;

/// Whether an ELF file uses the 32- or 64-bit layout (`EI_CLASS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElfClass {
    /// `ELFCLASS32`.
    Elf32,
    /// `ELFCLASS64`.
    Elf64,
}

/// What [`read_elf_info`] learns about an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// The 32- or 64-bit layout.
    pub class: ElfClass,
    /// `e_machine`, such as [`EM_X86_64`].
    pub machine: u16,
    /// `e_type`, such as [`ET_DYN`].
    pub elf_type: u16,
    /// `DT_SONAME`; `None` when the file has no dynamic segment or no such entry.
    pub soname: Option<String>,
}

/// Why an ELF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file does not start with the ELF magic bytes.
    #[error("not an ELF file")]
    NotElf,
    /// `EI_CLASS` is neither 32- nor 64-bit.
    #[error("unsupported ELF class {0}")]
    UnsupportedClass(u8),
    /// The file is big-endian; only little-endian objects are read.
    #[error("big-endian ELF files are not supported")]
    BigEndian,
    /// `EI_DATA` is neither little- nor big-endian.
    #[error("unsupported ELF data encoding {0}")]
    UnsupportedEncoding(u8),
    /// The file ends before a structure it refers to.
    #[error("truncated ELF file: {what} runs past the end of the file")]
    Truncated {
        /// The structure that is cut off.
        what: &'static str,
    },
    /// `e_phentsize` is smaller than a program header of the file's class.
    #[error("program header size {0} is too small")]
    BadProgramHeaderSize(u16),
    /// More program headers than [`MAX_PROGRAM_HEADERS`].
    #[error("too many program headers ({0})")]
    TooManyProgramHeaders(u16),
    /// A `PT_DYNAMIC` segment larger than [`MAX_DYNAMIC_SIZE`].
    #[error("dynamic segment of {0} bytes is too large")]
    DynamicTooLarge(u64),
    /// An offset or address computation overflows.
    #[error("{what} is out of range")]
    OutOfRange {
        /// The value that does not fit.
        what: &'static str,
    },
    /// The dynamic segment has `DT_SONAME` but no `DT_STRTAB`.
    #[error("dynamic segment has DT_SONAME but no DT_STRTAB")]
    MissingStrtab,
    /// `DT_STRTAB` lies in no `PT_LOAD` segment.
    #[error("DT_STRTAB address {0:#x} is not in any loadable segment")]
    StrtabNotMapped(u64),
    /// The soname has no NUL terminator within [`MAX_STRING_LEN`] bytes.
    #[error("soname is longer than {MAX_STRING_LEN} bytes")]
    StringTooLong,
    /// The soname is not UTF-8.
    #[error("soname is not valid UTF-8")]
    NonUtf8Soname,
    /// Reading from the underlying reader failed.
    #[error("failed to read ELF data")]
    Read {
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Opening a file failed, or reading the first bytes of one that
    /// [`read_elf_info_file`] was given.
    #[error("failed to open {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file could be opened but not read as ELF.
    #[error("failed to read ELF file {path}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<ElfError>,
    },
}

/// Reads `e_ident`, the ELF header, the program headers and the dynamic segment of an
/// ELF object and returns its class, machine, type and soname.
///
/// Only little-endian files are accepted. The soname's `DT_STRTAB` address is mapped to a
/// file offset through the `PT_LOAD` segments.
pub fn read_elf_info<R: Read + Seek>(r: &mut R) -> Result<ElfInfo, ElfError> {
    let mut ident = [0u8; 16];
    let got = read_up_to(r, 0, &mut ident)?;
    if got < 4 || ident[..4] != *b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if got < ident.len() {
        return Err(ElfError::Truncated { what: "e_ident" });
    }
    let class = match ident[4] {
        1 => ElfClass::Elf32,
        2 => ElfClass::Elf64,
        other => return Err(ElfError::UnsupportedClass(other)),
    };
    match ident[5] {
        1 => {}
        2 => return Err(ElfError::BigEndian),
        other => return Err(ElfError::UnsupportedEncoding(other)),
    }
    let layout = Layout::of(class);

    let mut header = [0u8; 64];
    let header = &mut header[..layout.ehdr_size];
    read_exact_at(r, 0, header, "ELF header")?;
    let elf_type = le_u16(header, 16);
    let machine = le_u16(header, 18);
    let (phoff, phentsize, phnum) = match class {
        ElfClass::Elf32 => (
            u64::from(le_u32(header, 28)),
            le_u16(header, 42),
            le_u16(header, 44),
        ),
        ElfClass::Elf64 => (le_u64(header, 32), le_u16(header, 54), le_u16(header, 56)),
    };

    let mut info = ElfInfo {
        class,
        machine,
        elf_type,
        soname: None,
    };
    if phnum == 0 {
        return Ok(info);
    }
    if phnum > MAX_PROGRAM_HEADERS {
        return Err(ElfError::TooManyProgramHeaders(phnum));
    }
    if usize::from(phentsize) < layout.phdr_size {
        return Err(ElfError::BadProgramHeaderSize(phentsize));
    }
    let mut segments = Vec::with_capacity(usize::from(phnum));
    let mut buf = [0u8; 56];
    let buf = &mut buf[..layout.phdr_size];
    for i in 0..u64::from(phnum) {
        let offset = i
            .checked_mul(u64::from(phentsize))
            .and_then(|o| o.checked_add(phoff))
            .ok_or(ElfError::OutOfRange {
                what: "program header offset",
            })?;
        read_exact_at(r, offset, buf, "program headers")?;
        segments.push(layout.segment(buf));
    }

    let Some(dynamic) = segments.iter().find(|s| s.kind == PT_DYNAMIC) else {
        return Ok(info);
    };
    if dynamic.filesz > MAX_DYNAMIC_SIZE {
        return Err(ElfError::DynamicTooLarge(dynamic.filesz));
    }
    // Bounded by MAX_DYNAMIC_SIZE just above.
    let mut table = vec![0u8; dynamic.filesz as usize];
    read_exact_at(r, dynamic.offset, &mut table, "dynamic segment")?;

    let (mut strtab, mut strsz, mut soname) = (None, None, None);
    for entry in table.chunks_exact(layout.dyn_size) {
        let (tag, val) = layout.dyn_entry(entry);
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = strtab.or(Some(val)),
            DT_STRSZ => strsz = strsz.or(Some(val)),
            DT_SONAME => soname = soname.or(Some(val)),
            _ => {}
        }
    }
    let Some(soname) = soname else {
        return Ok(info);
    };
    let strtab = strtab.ok_or(ElfError::MissingStrtab)?;
    if strsz.is_some_and(|size| soname >= size) {
        return Err(ElfError::OutOfRange {
            what: "DT_SONAME offset",
        });
    }
    let load = segments
        .iter()
        .find(|s| s.kind == PT_LOAD && strtab >= s.vaddr && strtab - s.vaddr < s.filesz)
        .ok_or(ElfError::StrtabNotMapped(strtab))?;
    let strtab_offset =
        load.offset
            .checked_add(strtab - load.vaddr)
            .ok_or(ElfError::OutOfRange {
                what: "DT_STRTAB offset",
            })?;
    let offset = strtab_offset
        .checked_add(soname)
        .ok_or(ElfError::OutOfRange {
            what: "DT_SONAME offset",
        })?;
    info.soname = Some(read_string_at(r, offset)?);
    Ok(info)
}

/// Reads the opened `file` (whose path is `path`) with [`read_elf_info`]; every error
/// names the file. Any file that positioned reads work on will do; in practice one from
/// [`HostProbe::open`](crate::probe::HostProbe::open).
pub fn read_elf_info_file(file: impl FileExt, path: &Path) -> Result<ElfInfo, ElfError> {
    let mut reader = Prefetched::new(file).map_err(|source| ElfError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    read_elf_info(&mut reader).map_err(|source| ElfError::File {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// A file whose first bytes are read once: the ELF header and program headers come
/// from memory, and the rest (the dynamic segment, the soname) with one `pread` each,
/// so checking a library costs a few system calls rather than a seek and a read per
/// program header. Discovery checks every driver library on each container start.
struct Prefetched<F> {
    file: F,
    head: Vec<u8>,
    pos: u64,
}

impl<F: FileExt> Prefetched<F> {
    /// How much is read up front: the headers of any real shared object.
    const HEAD: usize = 16 << 10;

    fn new(file: F) -> io::Result<Self> {
        let mut head = vec![0u8; Self::HEAD];
        let mut filled = 0;
        while filled < head.len() {
            match file.read_at(&mut head[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        head.truncate(filled);
        Ok(Prefetched { file, head, pos: 0 })
    }
}

impl<F: FileExt> Read for Prefetched<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match usize::try_from(self.pos)
            .ok()
            .filter(|p| *p < self.head.len())
        {
            Some(at) => {
                let n = buf.len().min(self.head.len() - at);
                buf[..n].copy_from_slice(&self.head[at..at + n]);
                n
            }
            None => self.file.read_at(buf, self.pos)?,
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl<F> Seek for Prefetched<F> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::Current(d) => self
                .pos
                .checked_add_signed(d)
                .ok_or(io::ErrorKind::InvalidInput)?,
            SeekFrom::End(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "no seek from the end",
                ))
            }
        };
        Ok(self.pos)
    }
}

/// Where the fields of the class-dependent structures are.
struct Layout {
    class: ElfClass,
    ehdr_size: usize,
    phdr_size: usize,
    dyn_size: usize,
}

/// The fields of one program header that the reader uses.
struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

impl Layout {
    fn of(class: ElfClass) -> Layout {
        match class {
            ElfClass::Elf32 => Layout {
                class,
                ehdr_size: 52,
                phdr_size: 32,
                dyn_size: 8,
            },
            ElfClass::Elf64 => Layout {
                class,
                ehdr_size: 64,
                phdr_size: 56,
                dyn_size: 16,
            },
        }
    }

    /// `buf` holds exactly `phdr_size` bytes.
    fn segment(&self, buf: &[u8]) -> Segment {
        match self.class {
            ElfClass::Elf32 => Segment {
                kind: le_u32(buf, 0),
                offset: u64::from(le_u32(buf, 4)),
                vaddr: u64::from(le_u32(buf, 8)),
                filesz: u64::from(le_u32(buf, 16)),
            },
            ElfClass::Elf64 => Segment {
                kind: le_u32(buf, 0),
                offset: le_u64(buf, 8),
                vaddr: le_u64(buf, 16),
                filesz: le_u64(buf, 32),
            },
        }
    }

    /// `buf` holds exactly `dyn_size` bytes.
    fn dyn_entry(&self, buf: &[u8]) -> (i64, u64) {
        match self.class {
            ElfClass::Elf32 => (i64::from(le_u32(buf, 0) as i32), u64::from(le_u32(buf, 4))),
            ElfClass::Elf64 => (le_u64(buf, 0) as i64, le_u64(buf, 8)),
        }
    }
}

/// Reads a NUL-terminated string of at most [`MAX_STRING_LEN`] bytes at `offset`.
fn read_string_at<R: Read + Seek>(r: &mut R, offset: u64) -> Result<String, ElfError> {
    let mut buf = vec![0u8; MAX_STRING_LEN];
    let got = read_up_to(r, offset, &mut buf)?;
    let Some(len) = buf[..got].iter().position(|&b| b == 0) else {
        return Err(if got < buf.len() {
            ElfError::Truncated { what: "soname" }
        } else {
            ElfError::StringTooLong
        });
    };
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| ElfError::NonUtf8Soname)
}

/// Fills `buf` from `offset`, stopping early only at the end of the data; returns how many
/// bytes were read.
fn read_up_to<R: Read + Seek>(r: &mut R, offset: u64, buf: &mut [u8]) -> Result<usize, ElfError> {
    r.seek(SeekFrom::Start(offset))
        .map_err(|source| ElfError::Read { source })?;
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ElfError::Read { source }),
        }
    }
    Ok(filled)
}

fn read_exact_at<R: Read + Seek>(
    r: &mut R,
    offset: u64,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), ElfError> {
    if read_up_to(r, offset, buf)? < buf.len() {
        return Err(ElfError::Truncated { what });
    }
    Ok(())
}

// The callers pass slices whose length they checked, so the indexing cannot fail; `get`
// keeps that true even if a caller is wrong, by reading zeros instead of panicking.
fn le_bytes<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = at.checked_add(N).and_then(|end| buf.get(at..end)) {
        out.copy_from_slice(src);
    }
    out
}

fn le_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(le_bytes(buf, at))
}

fn le_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(le_bytes(buf, at))
}

fn le_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(le_bytes(buf, at))
}

#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
