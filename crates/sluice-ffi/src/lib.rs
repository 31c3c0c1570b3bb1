//! The C ABI over the scheduler. Not built yet.
