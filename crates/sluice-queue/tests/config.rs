//! Bad input: invalid configuration is a typed error, pushes beyond capacity return the item,
//! stale and foreign handles are detected.

use sluice_queue::{
    ConfigError, Overflow, PushError, QueueKind, QueueSpec, RangeConfig, RankQueue, StaleHandle,
    TimingWheel, WheelConfig,
};

fn spec(kind: QueueKind, buckets: usize, g: u64, cap: usize) -> QueueSpec {
    QueueSpec::new(kind, buckets, g, cap)
}

#[test]
fn zero_granularity_buckets_and_capacity_are_errors_for_every_kind() {
    for kind in QueueKind::ALL {
        let bucketed = !kind.exact();
        if bucketed {
            assert_eq!(
                spec(kind, 64, 0, 10).build::<u32>().err(),
                Some(ConfigError::ZeroGranularity),
                "{kind}"
            );
            assert_eq!(
                spec(kind, 0, 1, 10).build::<u32>().err(),
                Some(ConfigError::ZeroBuckets),
                "{kind}"
            );
        }
        assert_eq!(
            spec(kind, 64, 1, 0).build::<u32>().err(),
            Some(ConfigError::ZeroCapacity),
            "{kind}"
        );
        assert!(
            matches!(
                spec(kind, 64, 1, usize::MAX).build::<u32>(),
                Err(ConfigError::CapacityTooLarge { .. })
            ),
            "{kind}"
        );
    }
}

#[test]
fn a_range_that_does_not_fit_is_an_error() {
    for kind in [
        QueueKind::Ffs,
        QueueKind::HierFfs,
        QueueKind::Gradient,
        QueueKind::BucketHeap,
    ] {
        let mut s = spec(kind, 1 << 20, 1 << 50, 10);
        s.base = 1 << 62;
        assert!(
            matches!(s.build::<u32>(), Err(ConfigError::RangeOverflow { .. })),
            "{kind}"
        );
    }
    assert!(matches!(
        spec(QueueKind::Ffs, (1 << 24) + 1, 1, 10).build::<u32>(),
        Err(ConfigError::TooManyBuckets { .. })
    ));
    assert!(matches!(
        spec(QueueKind::ApproxGradient, 100_000, 1, 10).build::<u32>(),
        Err(ConfigError::TooManyBuckets { .. })
    ));
    let mut s = spec(QueueKind::ApproxGradient, 100, 1, 10);
    s.alpha = 0;
    assert!(matches!(
        s.build::<u32>(),
        Err(ConfigError::BadAlpha { .. })
    ));
    s.alpha = 1000;
    assert!(matches!(
        s.build::<u32>(),
        Err(ConfigError::BadAlpha { .. })
    ));
}

#[test]
fn errors_read_well() {
    let e = spec(QueueKind::Cffs, 64, 0, 1)
        .build::<u32>()
        .err()
        .unwrap();
    assert!(e.to_string().contains("granularity"), "{e}");
}

#[test]
fn full_queues_hand_the_item_back() {
    for kind in QueueKind::ALL {
        let mut q = spec(kind, 16, 1, 3).build::<u32>().unwrap();
        for i in 0..3 {
            q.push(i, i as u32).unwrap();
        }
        assert_eq!(
            q.push(1, 77),
            Err(PushError::Full { rank: 1, item: 77 }),
            "{kind}"
        );
        assert_eq!(q.len(), 3);
        assert_eq!(q.stats().rejected_full, 1, "{kind}");
        q.pop_min().unwrap();
        assert!(q.push(1, 78).is_ok(), "{kind}: room again after a pop");
    }
}

#[test]
fn reject_policy_returns_beyond_horizon_items_and_counts_them() {
    let mut w: TimingWheel<u32> = TimingWheel::new(WheelConfig {
        overflow: Overflow::Reject,
        ..WheelConfig::new(100, 10, 16)
    })
    .unwrap();
    assert!(w.push(999, 1).is_ok(), "last slot is inside the horizon");
    assert_eq!(
        w.push(1000, 2),
        Err(PushError::OutOfRange {
            rank: 1000,
            item: 2
        })
    );
    assert_eq!(w.stats().rejected_range, 1);
    let mut c = WheelConfig::new(100, 10, 16);
    c.overflow = Overflow::Clamp;
    let mut w: TimingWheel<u32> = TimingWheel::new(c).unwrap();
    w.push(5_000, 1).unwrap();
    assert_eq!(w.next_deadline(), Some(990), "clamped into the last slot");
    assert_eq!(w.stats().clamped, 1);
}

#[test]
fn stale_and_foreign_handles_are_detected_everywhere() {
    for kind in QueueKind::ALL {
        let mut a = spec(kind, 64, 1, 8).build::<u32>().unwrap();
        let mut b = spec(kind, 64, 1, 8).build::<u32>().unwrap();
        let ha = a.push(3, 1).unwrap();
        let hb = b.push(3, 2).unwrap();
        // Foreign: a's handle on b must not remove, move or name b's item. Every kind starts
        // its generations at a seed of its own (the exact baselines started all at 1, and
        // `b.remove(ha)` removed b's first item).
        assert_eq!(b.remove(ha), Err(StaleHandle), "{kind}: foreign remove");
        assert_eq!(b.rank_of(ha), None, "{kind}: foreign rank_of");
        assert_eq!(b.len(), 1, "{kind}");
        // A requeue with it removes nothing and pushes its item, as documented.
        assert!(b.requeue(ha, 1, 9).is_ok(), "{kind}: foreign requeue");
        let mut left: Vec<u32> = std::iter::from_fn(|| b.pop_min().map(|e| e.item)).collect();
        left.sort();
        assert_eq!(left, [2, 9], "{kind}: foreign requeue");
        let _ = hb;
        assert_eq!(a.pop_min().unwrap().item, 1);
        assert_eq!(
            a.remove(ha),
            Err(StaleHandle),
            "{kind}: popped item's handle"
        );
        let h = a.push(4, 5).unwrap();
        assert_eq!(a.remove(h).unwrap().item, 5);
        assert_eq!(a.remove(h), Err(StaleHandle), "{kind}: double remove");
        assert!(a.stats().stale_handles >= 2, "{kind}");
    }
}

#[test]
fn range_config_constructor_validates() {
    assert!(sluice_queue::FfsQueue::<u32>::new(RangeConfig::new(64, 1, 1)).is_ok());
    assert!(sluice_queue::HierFfsQueue::<u32>::new(RangeConfig::new(0, 1, 1)).is_err());
}

#[test]
fn circular_queues_and_their_model_work_at_the_top_of_the_rank_space() {
    // With 3 buckets (which do not divide 2^64) the window below u64::MAX was tested as
    // `key + n >= base`, which overflowed; the oracle's model had two such sums.
    use sluice_queue::oracle::{KeyModel, Oracle};
    for kind in [QueueKind::Cffs, QueueKind::CircularApprox] {
        let mut q = spec(kind, 3, 1, 8).build::<u32>().unwrap();
        let mut o = Oracle::new(
            KeyModel::Circular {
                base: 0,
                granularity: 1,
                buckets: 3,
                overflow: Overflow::Clamp,
            },
            8,
        );
        for (i, r) in [u64::MAX, u64::MAX - 1, u64::MAX - 5, u64::MAX - 2]
            .into_iter()
            .enumerate()
        {
            q.push(r, i as u32).unwrap();
            o.push(r, i as u32).unwrap();
        }
        for _ in 0..4 {
            let (a, b) = (q.pop_min(), o.pop_min());
            assert_eq!(a.map(|e| e.item), b.map(|e| e.item), "{kind}");
        }
    }
}

#[test]
fn a_push_refused_as_full_is_not_counted_as_clamped() {
    for kind in QueueKind::ALL.into_iter().filter(|k| !k.exact()) {
        let mut q = spec(kind, 8, 1, 1).build::<u32>().unwrap();
        q.push(0, 0).unwrap();
        assert!(
            matches!(q.push(1 << 40, 1), Err(PushError::Full { .. })),
            "{kind}"
        );
        assert_eq!(q.stats().clamped, 0, "{kind}");
        q.pop_min().unwrap();
        q.push(1 << 40, 1).unwrap();
        let clamped = q.stats().clamped;
        assert!(clamped <= 1, "{kind}: {clamped}");
    }
}

#[test]
fn a_wheel_whose_horizon_exceeds_u64_says_u64_max() {
    let w: TimingWheel<u32> = TimingWheel::new(WheelConfig::new(4, u64::MAX / 2, 4)).unwrap();
    assert_eq!(w.horizon_ns(), u64::MAX);
}

#[test]
fn indexes_too_large_for_memory_are_errors_not_aborts() {
    // They allocated infallibly: a bucket heap of 2^30 buckets aborted the process under a
    // 1.5 GB limit where the other kinds returned OutOfMemory.
    use sluice_queue::{bucket_heap::HeapIndex, ffs::FlatBitmap, gradient::GradientIndex};
    let huge = usize::MAX / 8;
    assert!(matches!(
        HeapIndex::new(huge),
        Err(ConfigError::OutOfMemory { .. })
    ));
    assert!(matches!(
        GradientIndex::new(huge),
        Err(ConfigError::OutOfMemory { .. })
    ));
    assert!(matches!(
        FlatBitmap::new(usize::MAX),
        Err(ConfigError::OutOfMemory { .. })
    ));
}

#[test]
fn range_counters_start_exactly_past_the_last_ordered_bucket() {
    // 8 buckets of 10: a fixed range and a wheel order [0, 80); a circular queue based at 0
    // orders its primary and secondary, [0, 160). The last rank inside is neither clamped nor
    // rejected; the first rank past it is, once.
    for kind in QueueKind::ALL.into_iter().filter(|k| !k.exact()) {
        let end = if matches!(kind, QueueKind::Cffs | QueueKind::CircularApprox) {
            160
        } else {
            80
        };
        for overflow in [Overflow::Clamp, Overflow::Reject] {
            let mut s = spec(kind, 8, 10, 16);
            s.overflow = overflow;
            let mut q = s.build::<u32>().unwrap();
            q.push(0, 0).unwrap();
            q.push(end - 1, 1).unwrap();
            let st = q.stats();
            assert_eq!(
                (st.clamped, st.rejected_range),
                (0, 0),
                "{kind} {overflow:?}"
            );
            let past = q.push(end, 2);
            let st = q.stats();
            match overflow {
                Overflow::Clamp => {
                    assert!(past.is_ok(), "{kind}");
                    assert_eq!((st.clamped, st.rejected_range), (1, 0), "{kind}");
                }
                Overflow::Reject => {
                    assert!(matches!(past, Err(PushError::OutOfRange { .. })), "{kind}");
                    assert_eq!((st.clamped, st.rejected_range), (0, 1), "{kind}");
                }
            }
        }
    }
}

#[test]
fn a_handle_stays_stale_when_its_storage_is_reused_after_a_remove() {
    // The removal frees the item's storage; the next push takes the same storage back. The
    // removed item's handle must not name the new item.
    for kind in QueueKind::ALL {
        let mut q = spec(kind, 8, 1, 4).build::<u32>().unwrap();
        let old = q.push(3, 1).unwrap();
        assert_eq!(q.remove(old).map(|e| e.item), Ok(1), "{kind}");
        let new = q.push(3, 2).unwrap();
        assert_ne!(old, new, "{kind}");
        assert_eq!(q.rank_of(old), None, "{kind}");
        assert_eq!(q.remove(old), Err(StaleHandle), "{kind}");
        assert_eq!(q.len(), 1, "{kind}");
        assert_eq!(q.remove(new).map(|e| e.item), Ok(2), "{kind}");
    }
}

#[test]
fn a_requeue_past_the_range_is_counted_as_clamped_in_place_or_not() {
    for kind in QueueKind::ALL.into_iter().filter(|k| !k.exact()) {
        let mut q = spec(kind, 8, 10, 16).build::<u32>().unwrap();
        // Holds a moving range where it is.
        q.push(0, 0).unwrap();
        // Alone in its bucket: a fixed range's requeue moves it in place.
        let h = q.push(55, 1).unwrap();
        let h = q.requeue(h, 1 << 40, 1).unwrap();
        assert_eq!(q.stats().clamped, 1, "{kind}: in place");
        // Not alone: removed and pushed.
        q.push(1 << 40, 2).unwrap();
        q.requeue(h, 1 << 41, 1).unwrap();
        assert_eq!(q.stats().clamped, 3, "{kind}: remove and push");
        assert_eq!(q.len(), 3, "{kind}");
    }
}

#[test]
fn bucket_for_names_the_bucket_a_push_files_under() {
    let cfg = RangeConfig {
        base: 100,
        ..RangeConfig::new(8, 10, 16)
    };
    let q: sluice_queue::FfsQueue<u32> = sluice_queue::FfsQueue::new(cfg).unwrap();
    for (rank, bucket) in [
        (0, 0),
        (99, 0),
        (100, 0),
        (109, 0),
        (110, 1),
        (169, 6),
        (170, 7),
        (179, 7),
        (180, 7),
        (u64::MAX, 7),
    ] {
        assert_eq!(q.bucket_for(rank), bucket, "rank {rank}");
    }
}
