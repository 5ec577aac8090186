//! Fake NVIDIA driver trees for tests.
