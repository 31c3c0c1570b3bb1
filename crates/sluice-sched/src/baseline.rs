//! Baselines the scheduler is measured against (ports of other schedulers' algorithms).
