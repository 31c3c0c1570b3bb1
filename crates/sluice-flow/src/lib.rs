//! Lossless flow control: deferred completions, zD admission, dynamic per-flow queues, doorbells, overlay pause frames, per-core engines. Not built yet (issue 4).
