//! Mounts a test makes (a tmpfs, a read-only or shared bind mount), each undone when its
//! [`TestMount`] is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::FakeError;

use super::describe;

/// A mount a test made, unmounted when dropped (lazily, so that a mount a failed test left
/// busy goes too): tests that mount never leave the host's mount table changed.
#[derive(Debug)]
pub struct TestMount {
    target: PathBuf,
}

impl TestMount {
    /// A tmpfs at `target` (created if missing) with `options`, such as `size=64k`.
    pub fn tmpfs(target: &Path, options: &str) -> Result<TestMount, FakeError> {
        std::fs::create_dir_all(target).map_err(FakeError::io("create directory", target))?;
        let mut mount = Command::new("mount");
        mount
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(target);
        run_mount(mount, "mount a tmpfs")?;
        Ok(TestMount {
            target: target.to_path_buf(),
        })
    }

    /// `dir` bind-mounted read-only onto itself: its files stay readable, nothing in it
    /// can be created, changed or removed.
    pub fn read_only(dir: &Path) -> Result<TestMount, FakeError> {
        let mut bind = Command::new("mount");
        bind.arg("--bind").arg(dir).arg(dir);
        run_mount(bind, "bind-mount a directory onto itself")?;
        // From here on, dropping the guard unmounts the bind mount.
        let guard = TestMount {
            target: dir.to_path_buf(),
        };
        let mut remount = Command::new("mount");
        remount.args(["-o", "remount,bind,ro"]).arg(dir);
        run_mount(remount, "make a bind mount read-only")?;
        Ok(guard)
    }

    /// `dir` bind-mounted onto itself and made a shared mount (its own peer group), as a
    /// host folder a container engine mounts with shared propagation: what is mounted in
    /// any of its peers shows up here.
    pub fn shared(dir: &Path) -> Result<TestMount, FakeError> {
        let mut bind = Command::new("mount");
        bind.arg("--bind").arg(dir).arg(dir);
        run_mount(bind, "bind-mount a directory onto itself")?;
        let guard = TestMount {
            target: dir.to_path_buf(),
        };
        let mut shared = Command::new("mount");
        shared.arg("--make-shared").arg(dir);
        run_mount(shared, "make a bind mount shared")?;
        Ok(guard)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.target
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn run_mount(mut command: Command, step: &'static str) -> Result<(), FakeError> {
    let line = describe(&command);
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| FakeError::Spawn {
            step,
            program: "mount".into(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FakeError::Command {
            step,
            command: line,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}
