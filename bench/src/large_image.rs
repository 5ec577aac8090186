//! A large image: the test rootfs plus thousands of shared libraries, each with its own
//! soname, listed in the image's ld.so.cache, so the hook's cache update has real work.
//!
//! The libraries are minimal ELF shared objects written directly (no gcc, so this also
//! works on a GPU machine without a toolchain): one read-only `PT_LOAD`, a `PT_DYNAMIC`
//! with `DT_SONAME`, `DT_STRTAB`, `DT_SYMTAB` and `DT_HASH`. The host's `ldconfig -r`
//! reads their sonames, makes the soname links and writes the cache, as an image build
//! would have.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::BenchError;

/// Where the libraries go inside the image: Debian's multiarch folder, where most of an
/// image's libraries are and where nvc puts the driver's.
pub const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";

/// The soname of library `i`: `libnvcbench0042.so.1`.
pub fn soname(i: usize) -> String {
    format!("libnvcbench{i:04}.so.1")
}

/// The file name of library `i`: `libnvcbench0042.so.1.0` (the soname is a link to it).
pub fn file_name(i: usize) -> String {
    format!("{}.0", soname(i))
}

/// The bytes of an x86-64 ELF shared object whose `DT_SONAME` is `soname`.
pub fn shared_object(soname: &str) -> Vec<u8> {
    const EHDR: u64 = 64;
    const PHDR: u64 = 56;
    const PHNUM: u64 = 2;
    const HASH_AT: u64 = EHDR + PHNUM * PHDR; // 0xb0: nbucket, nchain, bucket, chain
    const SYMTAB_AT: u64 = HASH_AT + 16; // one null symbol
    const STRTAB_AT: u64 = SYMTAB_AT + 24;
    let mut strtab = vec![0u8];
    strtab.extend_from_slice(soname.as_bytes());
    strtab.push(0);
    let strsz = strtab.len() as u64;
    let dynamic_at = (STRTAB_AT + strsz).next_multiple_of(8);
    let dynamic: [(u64, u64); 7] = [
        (14, 1),        // DT_SONAME: offset in the string table
        (4, HASH_AT),   // DT_HASH
        (5, STRTAB_AT), // DT_STRTAB
        (6, SYMTAB_AT), // DT_SYMTAB
        (10, strsz),    // DT_STRSZ
        (11, 24),       // DT_SYMENT
        (0, 0),         // DT_NULL
    ];
    let dynamic_size = dynamic.len() as u64 * 16;
    let total = dynamic_at + dynamic_size;

    let mut out = Vec::with_capacity(total as usize);
    // ELF header: 64-bit, little-endian, version 1, System V ABI.
    out.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    put16(&mut out, 3); // ET_DYN
    put16(&mut out, 62); // EM_X86_64
    put32(&mut out, 1); // EV_CURRENT
    put64(&mut out, 0); // e_entry
    put64(&mut out, EHDR); // e_phoff
    put64(&mut out, 0); // e_shoff: no section headers
    put32(&mut out, 0); // e_flags
    put16(&mut out, EHDR as u16);
    put16(&mut out, PHDR as u16);
    put16(&mut out, PHNUM as u16);
    put16(&mut out, 64); // e_shentsize
    put16(&mut out, 0); // e_shnum
    put16(&mut out, 0); // e_shstrndx
                        // PT_LOAD: the whole file, read-only, at address 0.
    program_header(&mut out, 1, 4, 0, total, 0x1000);
    // PT_DYNAMIC.
    program_header(&mut out, 2, 4, dynamic_at, dynamic_size, 8);
    // DT_HASH: one bucket, one chain entry, both the null symbol.
    for word in [1u32, 1, 0, 0] {
        put32(&mut out, word);
    }
    out.extend_from_slice(&[0u8; 24]);
    out.extend_from_slice(&strtab);
    out.resize(dynamic_at as usize, 0);
    for (tag, value) in dynamic {
        put64(&mut out, tag);
        put64(&mut out, value);
    }
    out
}

fn program_header(out: &mut Vec<u8>, kind: u32, flags: u32, at: u64, size: u64, align: u64) {
    put32(out, kind);
    put32(out, flags);
    put64(out, at); // p_offset
    put64(out, at); // p_vaddr
    put64(out, at); // p_paddr
    put64(out, size); // p_filesz
    put64(out, size); // p_memsz
    put64(out, align);
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Makes `dest` a copy of `template` with `count` libraries in [`LIB_DIR`], that folder
/// listed in the image's ld.so.conf, and an ld.so.cache listing them. Returns the number
/// of entries of the new cache.
pub fn build(template: &Path, dest: &Path, count: usize) -> Result<usize, BenchError> {
    copy_tree(template, dest)?;
    let dir = dest.join(LIB_DIR);
    std::fs::create_dir_all(&dir).map_err(BenchError::io("create directory", &dir))?;
    for i in 0..count {
        let path = dir.join(file_name(i));
        std::fs::write(&path, shared_object(&soname(i))).map_err(BenchError::io("write", &path))?;
    }
    list_in_ld_so_conf(dest, &format!("/{LIB_DIR}"))?;
    let mut ldconfig = Command::new(host_ldconfig());
    ldconfig.arg("-r").arg(dest);
    run_quiet(&mut ldconfig)?;

    let cache_path = dest.join("etc/ld.so.cache");
    let data = std::fs::read(&cache_path).map_err(|source| {
        BenchError::LdCache(libnvc::ldcache::LdCacheError::Read {
            path: cache_path.clone(),
            source,
        })
    })?;
    let cache = libnvc::ldcache::parse_file(&data, &cache_path).map_err(BenchError::LdCache)?;
    let found = cache
        .entries
        .iter()
        .filter(|e| e.name.starts_with("libnvcbench"))
        .count();
    if found != count {
        return Err(BenchError::LargeImage {
            path: cache_path,
            found,
            expected: count,
        });
    }
    Ok(cache.entries.len())
}

/// What must not change in the large image while runs use hard links to its files: its
/// ld.so.cache (bytes) and its library folder (names and inode numbers).
#[derive(Debug, PartialEq, Eq)]
pub struct Fingerprint {
    cache: Vec<u8>,
    files: Vec<(String, u64)>,
}

/// The [`Fingerprint`] of the image at `root`.
pub fn fingerprint(root: &Path) -> Result<Fingerprint, BenchError> {
    use std::os::unix::fs::MetadataExt;
    let cache = root.join("etc/ld.so.cache");
    let bytes = std::fs::read(&cache).map_err(BenchError::io("read", &cache))?;
    let dir = root.join(LIB_DIR);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(BenchError::io("list", &dir))? {
        let entry = entry.map_err(BenchError::io("list", &dir))?;
        let meta = entry
            .metadata()
            .map_err(BenchError::io("stat", entry.path()))?;
        files.push((entry.file_name().to_string_lossy().into_owned(), meta.ino()));
    }
    files.sort();
    Ok(Fingerprint {
        cache: bytes,
        files,
    })
}

/// Fails when the large image differs from its [`fingerprint`] `before`: a run wrote into
/// a hard-linked file, so later runs would have seen its leftovers.
pub fn check_unchanged(root: &Path, before: &Fingerprint) -> Result<(), BenchError> {
    if fingerprint(root)? == *before {
        Ok(())
    } else {
        Err(BenchError::ImageChanged {
            path: root.to_path_buf(),
        })
    }
}

/// Adds `dir` to `<root>/etc/ld.so.conf` unless it or a file it includes lists it.
fn list_in_ld_so_conf(root: &Path, dir: &str) -> Result<(), BenchError> {
    let conf = root.join("etc/ld.so.conf");
    let mut texts = vec![std::fs::read_to_string(&conf).unwrap_or_default()];
    if let Ok(entries) = std::fs::read_dir(root.join("etc/ld.so.conf.d")) {
        for entry in entries.flatten() {
            texts.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    if texts.iter().any(|t| t.lines().any(|l| l.trim() == dir)) {
        return Ok(());
    }
    let mut text = texts.swap_remove(0);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(dir);
    text.push('\n');
    std::fs::write(&conf, text).map_err(BenchError::io("write", &conf))
}

/// The host's ldconfig; Debian's is static, so it also runs chrooted into an image.
pub fn host_ldconfig() -> PathBuf {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .map(PathBuf::from)
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("ldconfig"))
}

/// `cp -a template dest`: owners, modes, links and device nodes kept.
pub fn copy_tree(template: &Path, dest: &Path) -> Result<(), BenchError> {
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(template).arg(dest);
    run_quiet(&mut cp)
}

/// Runs `command` to its end; a failure is an error carrying its stderr.
pub fn run_quiet(command: &mut Command) -> Result<(), BenchError> {
    run_fed(command, Stdio::null())
}

/// [`run_quiet`] with `stdin` on the command's standard input.
pub fn run_fed(command: &mut Command, stdin: Stdio) -> Result<(), BenchError> {
    let line = crate::measure::describe(command);
    let output = command
        .stdin(stdin)
        .stdout(Stdio::null())
        .output()
        .map_err(|source| BenchError::Spawn {
            program: line.clone(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(BenchError::Failed {
        command: line,
        status: output.status.to_string(),
        details: stderr_details(&String::from_utf8_lossy(&output.stderr)),
    })
}

/// `": <stderr>"`, trimmed, or nothing.
pub fn stderr_details(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_objects_carry_their_soname() {
        let bytes = shared_object(&soname(42));
        let info = libnvc::elf::read_elf_info(&mut std::io::Cursor::new(&bytes)).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libnvcbench0042.so.1"));
        assert_eq!(info.elf_type, 3);
        assert_eq!(info.machine, 62);
        assert_eq!(file_name(7), "libnvcbench0007.so.1.0");
    }

    #[test]
    fn ld_so_conf_gets_the_folder_once() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(etc.join("ld.so.conf.d")).unwrap();
        std::fs::write(etc.join("ld.so.conf"), "/usr/local/lib").unwrap();
        list_in_ld_so_conf(dir.path(), "/opt/x").unwrap();
        list_in_ld_so_conf(dir.path(), "/opt/x").unwrap();
        let text = std::fs::read_to_string(etc.join("ld.so.conf")).unwrap_or_default();
        assert_eq!(text, "/usr/local/lib\n/opt/x\n");
        std::fs::write(etc.join("ld.so.conf.d/a.conf"), "/opt/y\n").unwrap();
        list_in_ld_so_conf(dir.path(), "/opt/y").unwrap();
        assert_eq!(
            std::fs::read_to_string(etc.join("ld.so.conf")).unwrap_or_default(),
            text
        );
    }
}
