//! The programmable scheduler: PIFO trees with per-flow and on-dequeue ranking, one shaper, Carousel timestamping, built-in policies and policy files. Not built yet (issue 3).
