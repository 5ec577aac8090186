//! unsafe lives here
