//! The ELF reader's tests, on real objects built by gcc (a missing gcc fails them,
//! saying so) and on their bytes corrupted.

use std::fs::File;
use std::io::Cursor;

use super::test_support::{gcc, shared_object, shared_object_32};
use super::*;

/// Opens `path` and reads it with [`read_elf_info_file`], as discovery does with the
/// file its probe opened.
fn read_path(path: &Path) -> Result<ElfInfo, ElfError> {
    let file = File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    read_elf_info_file(file, path)
}

fn info_of(path: &Path) -> ElfInfo {
    read_path(path).unwrap_or_else(|e| panic!("{path:?}: {e:?}"))
}

fn info_of_bytes(bytes: &[u8]) -> Result<ElfInfo, ElfError> {
    read_elf_info(&mut Cursor::new(bytes))
}

#[test]
fn shared_object_64_has_class_machine_type_and_soname() {
    let dir = tempfile::tempdir().unwrap();
    let so = shared_object(dir.path(), "libfoo.so.1.2.3", Some("libfoo.so.1"));
    let info = info_of(&so);
    assert_eq!(
        info,
        ElfInfo {
            class: ElfClass::Elf64,
            machine: EM_X86_64,
            elf_type: ET_DYN,
            soname: Some("libfoo.so.1".into()),
        }
    );
}

#[test]
fn shared_object_32_has_class_machine_type_and_soname() {
    let dir = tempfile::tempdir().unwrap();
    let so = match shared_object_32(dir.path(), "libfoo32.so.1", "libfoo.so.1", None) {
        Ok(so) => so,
        Err(why) => panic!("gcc -m32 does not work here (install gcc-multilib): {why}"),
    };
    let info = info_of(&so);
    assert_eq!(
        info,
        ElfInfo {
            class: ElfClass::Elf32,
            machine: EM_386,
            elf_type: ET_DYN,
            soname: Some("libfoo.so.1".into()),
        }
    );
}

#[test]
fn shared_object_without_soname() {
    let dir = tempfile::tempdir().unwrap();
    let so = shared_object(dir.path(), "libnosoname.so", None);
    let info = info_of(&so);
    assert_eq!(info.elf_type, ET_DYN);
    assert_eq!(info.soname, None);
}

#[test]
fn executables_have_no_soname() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.c"), "int main(void) { return 0; }\n").unwrap();
    gcc(dir.path(), &["-no-pie", "-o", "exe"]).unwrap();
    let info = info_of(&dir.path().join("exe"));
    assert_eq!(info.class, ElfClass::Elf64);
    assert_eq!(info.machine, EM_X86_64);
    assert_eq!(info.elf_type, ET_EXEC);
    assert_eq!(info.soname, None);

    // A position-independent executable is ET_DYN, still without a soname.
    gcc(dir.path(), &["-pie", "-fPIE", "-o", "pie"]).unwrap();
    let info = info_of(&dir.path().join("pie"));
    assert_eq!(info.elf_type, ET_DYN);
    assert_eq!(info.soname, None);
}

#[test]
fn non_elf_and_empty_files_are_not_elf() {
    for data in [
        &b""[..],
        b"\x7fEL",
        b"GROUP ( /lib/libc.so.6 )\n",
        &[0u8; 100],
    ] {
        assert!(
            matches!(info_of_bytes(data), Err(ElfError::NotElf)),
            "{data:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("libc.so");
    std::fs::write(&script, "/* GNU ld script */\nGROUP ( libc.so.6 )\n").unwrap();
    let err = read_path(&script).unwrap_err();
    assert!(
        matches!(&err, ElfError::File { path, source } if path == &script && matches!(**source, ElfError::NotElf)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("failed to read ELF file {}", script.display())
    );
}

#[test]
fn unreadable_file_error_names_the_path() {
    // A directory opens, but reading it fails (EISDIR).
    let dir = tempfile::tempdir().unwrap();
    let err = read_path(dir.path()).unwrap_err();
    assert!(
        matches!(&err, ElfError::Open { path, source } if path == dir.path() && source.kind() == io::ErrorKind::IsADirectory),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("failed to open {}", dir.path().display())
    );
}

#[test]
fn truncated_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let so = shared_object(dir.path(), "libfoo.so.1", Some("libfoo.so.1"));
    let bytes = std::fs::read(so).unwrap();
    for len in [5, 16, 30, 63, 200] {
        let err = info_of_bytes(&bytes[..len]).unwrap_err();
        assert!(matches!(err, ElfError::Truncated { .. }), "{len}: {err:?}");
    }
}

#[test]
fn big_endian_and_bad_class_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let so = shared_object(dir.path(), "libfoo.so.1", Some("libfoo.so.1"));
    let mut bytes = std::fs::read(so).unwrap();
    bytes[5] = 2;
    assert!(matches!(info_of_bytes(&bytes), Err(ElfError::BigEndian)));
    bytes[5] = 7;
    assert!(matches!(
        info_of_bytes(&bytes),
        Err(ElfError::UnsupportedEncoding(7))
    ));
    bytes[5] = 1;
    bytes[4] = 3;
    assert!(matches!(
        info_of_bytes(&bytes),
        Err(ElfError::UnsupportedClass(3))
    ));
}

#[test]
fn hostile_headers_give_errors_not_panics_or_huge_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let so = shared_object(dir.path(), "libfoo.so.1", Some("libfoo.so.1"));
    let good = std::fs::read(so).unwrap();

    // e_phnum beyond the cap.
    let mut bytes = good.clone();
    bytes[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
    assert!(matches!(
        info_of_bytes(&bytes),
        Err(ElfError::TooManyProgramHeaders(0xffff))
    ));
    // e_phentsize too small.
    let mut bytes = good.clone();
    bytes[54..56].copy_from_slice(&8u16.to_le_bytes());
    assert!(matches!(
        info_of_bytes(&bytes),
        Err(ElfError::BadProgramHeaderSize(8))
    ));
    // e_phoff near u64::MAX: the offset computation overflows.
    let mut bytes = good.clone();
    bytes[32..40].copy_from_slice(&(u64::MAX - 10).to_le_bytes());
    assert!(info_of_bytes(&bytes).is_err());

    // Every truncation and many random corruptions: errors or answers, never a panic.
    for len in 0..good.len().min(20_000) {
        let _ = info_of_bytes(&good[..len]);
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 8 {
            // Mostly the headers, where the offsets are.
            let limit = if next() % 4 == 0 { bytes.len() } else { 1024 };
            let at = (next() as usize) % limit.min(bytes.len());
            bytes[at] = next() as u8;
        }
        let _ = info_of_bytes(&bytes);
    }
}
