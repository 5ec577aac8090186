//! The OCI state a hook reads on stdin, read once for every kind of hook: bounded, with an
//! error past the bound, never cut silently.

use std::io::Read;

use crate::oci::spec::MAX_SPEC_SIZE;

/// The most of the state read: runc copies the spec's annotations into it, so it may be
/// as large as a spec, plus the rest of the state.
pub const MAX_STATE: u64 = MAX_SPEC_SIZE + (64 << 10);

/// Why the state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading stdin failed.
    #[error("cannot read the container state on stdin")]
    Read(#[source] std::io::Error),
    /// The state is larger than any runtime sends.
    #[error("the container state on stdin is larger than {0} bytes")]
    TooLarge(u64),
}

/// Reads the whole state from `input`, at most [`MAX_STATE`] bytes.
pub fn read(input: impl Read) -> Result<Vec<u8>, StateError> {
    read_at_most(input, MAX_STATE)
}

fn read_at_most(input: impl Read, max: u64) -> Result<Vec<u8>, StateError> {
    let mut raw = Vec::new();
    input
        .take(max + 1)
        .read_to_end(&mut raw)
        .map_err(StateError::Read)?;
    if raw.len() as u64 > max {
        return Err(StateError::TooLarge(max));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_up_to_the_bound_are_read_whole_and_larger_ones_refused() {
        let big = vec![b'a'; 3 << 20];
        assert_eq!(read(&big[..]).unwrap().len(), big.len());
        let exact = vec![b'a'; 100];
        assert_eq!(read_at_most(&exact[..], 100).unwrap(), exact);
        let err = read_at_most(&exact[..], 99).unwrap_err();
        assert!(matches!(err, StateError::TooLarge(99)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "the container state on stdin is larger than 99 bytes"
        );
    }
}
