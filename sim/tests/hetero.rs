#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The migration paper's policies on hand-computed traces, and their invariants on random workloads.

use ninf_sim::hetero::{
    CostConstants, FAST, HeteroJob, HeteroMachine, HeteroPolicy, MigrationModel, Piece, SLOW,
};
use ninf_sim::simulate_hetero;
use proptest::prelude::*;

/// Checkpoint and restart cost 1 s each, whatever the memory.
fn one_second_each() -> MigrationModel {
    let constants = CostConstants {
        checkpoint_per_mb: 0.0,
        checkpoint_fixed: 1.0,
        restart_per_mb: 0.0,
        restart_fixed: 1.0,
    };
    MigrationModel {
        kinds: [constants; 2],
        kernel_compile: 0.0,
    }
}

fn machine(fast: u32, slow: u32) -> HeteroMachine {
    HeteroMachine {
        units: [fast, slow],
        actual: one_second_each(),
        predicted: one_second_each(),
    }
}

fn job(id: u64, submit: f64, resources: u32, slow_run: f64, acceleration: f64) -> HeteroJob {
    HeteroJob {
        id,
        submit,
        resources,
        slow_run,
        acceleration,
        memory_mb: 1024.0,
    }
}

fn piece(kind: usize, start: f64, end: f64) -> Piece {
    Piece { kind, start, end }
}

/// Job 1 holds one fast unit for 10 s, job 2 both fast units from 10 to 20; job 3 (one unit,
/// 5 s fast or 50 s slow) arrives at 1.
fn hole_on_fast() -> Vec<HeteroJob> {
    vec![
        job(1, 0.0, 1, 100.0, 10.0),
        job(2, 0.0, 2, 100.0, 10.0),
        job(3, 1.0, 1, 50.0, 10.0),
    ]
}

fn pieces_of(policy: HeteroPolicy, jobs: &[HeteroJob], id: u64) -> Vec<Piece> {
    let run = simulate_hetero(jobs, machine(2, 2), policy).unwrap();
    run.outcomes
        .into_iter()
        .find(|o| o.id == id)
        .unwrap()
        .pieces
}

#[test]
fn mct_waits_behind_earlier_jobs_and_mctb_backfills_the_hole() {
    let jobs = hole_on_fast();
    // MCT: fast no earlier than job 2's start (10) and with two units busy until 20: 20-25,
    // which beats 1-51 on the slow kind.
    assert_eq!(
        pieces_of(HeteroPolicy::Mct, &jobs, 3),
        vec![piece(FAST, 20.0, 25.0)]
    );
    // MCTB: the free fast unit from 1 to 10 holds the 5 s run.
    assert_eq!(
        pieces_of(HeteroPolicy::Mctb, &jobs, 3),
        vec![piece(FAST, 1.0, 6.0)]
    );
    assert_eq!(
        pieces_of(HeteroPolicy::Mctbm, &jobs, 3),
        vec![piece(FAST, 1.0, 6.0)]
    );
    // Under MCT job 3 waited 19 s while the slow kind stood idle: all of it "wait A".
    let run = simulate_hetero(&jobs, machine(2, 2), HeteroPolicy::Mct).unwrap();
    let b = run.outcomes[2].breakdown;
    assert_eq!((b.run, b.migration), (5.0, 0.0));
    assert!((b.wait_idle_present - 19.0).abs() < 1e-9, "{b:?}");
    assert_eq!(b.wait_no_resources, 0.0);
}

#[test]
fn mctm_runs_on_idle_slow_units_then_migrates_to_fast() {
    // Planned with 1 + 1 s per region: 17 s of the 50 s slow run (0.34), then the rest on
    // fast from 20: 1 s restart + 0.66 × 5 s, ending 24.3 < 25. Executed: the first piece
    // pays no restart, so it computes 18 s (0.36) and the fast piece ends at 20 + 1 + 3.2.
    let pieces = pieces_of(HeteroPolicy::Mctm, &hole_on_fast(), 3);
    assert_eq!(pieces.len(), 2);
    assert_eq!(pieces[0], piece(SLOW, 1.0, 20.0));
    assert_eq!((pieces[1].kind, pieces[1].start), (FAST, 20.0));
    assert!((pieces[1].end - 24.2).abs() < 1e-9, "{pieces:?}");
    let run = simulate_hetero(&hole_on_fast(), machine(2, 2), HeteroPolicy::Mctm).unwrap();
    let b = run.outcomes[2].breakdown;
    assert!(
        (b.run - 21.2).abs() < 1e-9 && (b.migration - 2.0).abs() < 1e-9,
        "{b:?}"
    );
    assert_eq!(run.migrated_jobs, 1);
}

#[test]
fn mctbm_splits_a_job_over_regions_on_both_kinds() {
    // Fast: one unit busy 0-10, both 10-30. Slow: both busy 0-20. Job 4 (one unit, 20 s
    // fast, 40 s slow) would start on fast at 30 and end at 50 under MCTB. MCTBM takes the
    // free fast unit 0-10 (planned gain 8/20), the slow units 20-30 (8/40), and the rest on
    // fast at 30 (planned 1 + 0.4 × 20 = 9 s, so 39 < 50).
    let jobs = vec![
        job(1, 0.0, 1, 10.0, 1.0),
        job(2, 0.0, 2, 20.0, 1.0),
        job(3, 0.0, 2, 20.0, 1.0),
        job(4, 0.0, 1, 40.0, 2.0),
    ];
    assert_eq!(
        pieces_of(HeteroPolicy::Mctb, &jobs, 4),
        vec![piece(FAST, 30.0, 50.0)]
    );
    let pieces = pieces_of(HeteroPolicy::Mctbm, &jobs, 4);
    // Executed: 9 s computed in 0-10 (no restart), 8 s in 20-30, and 0.35 × 20 = 7 s after
    // a 1 s restart at 30.
    assert_eq!(
        pieces,
        vec![
            piece(FAST, 0.0, 10.0),
            piece(SLOW, 20.0, 30.0),
            piece(FAST, 30.0, 38.0)
        ]
    );
    let run = simulate_hetero(&jobs, machine(2, 2), HeteroPolicy::Mctbm).unwrap();
    let b = run.outcomes[3].breakdown;
    assert!((b.run - 24.0).abs() < 1e-9, "{b:?}");
    assert!((b.migration - 4.0).abs() < 1e-9, "{b:?}");
    // Between 10 and 20 nothing had a free unit: wait B.
    assert!((b.wait_no_resources - 10.0).abs() < 1e-9, "{b:?}");
    assert_eq!(b.wait_idle_present, 0.0);
    // Job 4's pieces leave jobs 1-3 exactly where MCTB put them.
    for id in 1..=3 {
        assert_eq!(
            pieces_of(HeteroPolicy::Mctbm, &jobs, id),
            pieces_of(HeteroPolicy::Mctb, &jobs, id)
        );
    }
}

#[test]
fn migration_is_skipped_when_it_costs_more_than_it_saves() {
    // Restarts that cost 30 s: the 19 s slow region cannot even pay for itself.
    let mut m = machine(2, 2);
    m.predicted.kinds[SLOW].restart_fixed = 30.0;
    m.actual.kinds[SLOW].restart_fixed = 30.0;
    let run = simulate_hetero(&hole_on_fast(), m, HeteroPolicy::Mctm).unwrap();
    assert_eq!(run.outcomes[2].pieces, vec![piece(FAST, 20.0, 25.0)]);
    // Over-estimating the cost 3x also stops it, even though the real cost would pay.
    let mut m = machine(2, 2);
    for k in &mut m.predicted.kinds {
        k.checkpoint_fixed = 10.0;
        k.restart_fixed = 10.0;
    }
    let run = simulate_hetero(&hole_on_fast(), m, HeteroPolicy::Mctm).unwrap();
    assert_eq!(run.outcomes[2].pieces.len(), 1);
}

#[test]
fn bad_jobs_are_refused_with_their_field() {
    let too_wide = simulate_hetero(
        &[job(7, 0.0, 3, 10.0, 2.0)],
        machine(2, 2),
        HeteroPolicy::Mct,
    );
    assert_eq!(
        too_wide.map(|_| ()).map_err(|e| e.to_string()),
        Err("job 7 needs 3 processors; the machine has 2".to_string())
    );
    let slow_accelerator = simulate_hetero(
        &[job(8, 0.0, 1, 10.0, 0.5)],
        machine(2, 2),
        HeteroPolicy::Mct,
    );
    assert_eq!(
        slow_accelerator.map(|_| ()).map_err(|e| e.to_string()),
        Err("job 8 has acceleration 0.5; it must be at least 1".to_string())
    );
}

#[test]
fn model_scaling_matches_the_seeds_constants() {
    let model = MigrationModel::seed002();
    assert!((model.seconds_per_gb() - 24.73).abs() < 0.01);
    let doubled = model.scaled_to(50.0);
    assert!((doubled.seconds_per_gb() - 50.0).abs() < 1e-9);
    // 1 GB from the slow (CPU) kind to the fast (GPU) kind: 15.36 + 0.92 + 9.8304 + 0.89.
    let cost = model.checkpoint(SLOW, 1024.0) + model.restart(FAST, 1024.0);
    assert!((cost - 27.0004).abs() < 1e-9, "{cost}");
}

fn check_invariants(
    jobs: &[HeteroJob],
    m: HeteroMachine,
    policy: HeteroPolicy,
) -> Result<(), TestCaseError> {
    let run = simulate_hetero(jobs, m, policy).unwrap();
    prop_assert_eq!(run.outcomes.len(), jobs.len());
    let mut use_of: Vec<(usize, f64, f64, u32)> = Vec::new();
    for o in &run.outcomes {
        let job = jobs.iter().find(|j| j.id == o.id).unwrap();
        prop_assert!(!o.pieces.is_empty());
        prop_assert!(o.pieces[0].start >= job.submit);
        let last = o.pieces.len() - 1;
        let mut work = 0.0;
        for (i, p) in o.pieces.iter().enumerate() {
            prop_assert!(p.end > p.start);
            if i > 0 {
                prop_assert!(p.start >= o.pieces[i - 1].end);
            }
            let restart = if i > 0 { 1.0 } else { 0.0 };
            let checkpoint = if i < last { 1.0 } else { 0.0 };
            work += (p.end - p.start - restart - checkpoint) / job.run_on(p.kind);
            use_of.push((p.kind, p.start, p.end, o.resources));
        }
        // Work is conserved: the pieces compute exactly the whole job.
        prop_assert!((work - 1.0).abs() < 1e-6, "job {} computed {}", o.id, work);
        let b = o.breakdown;
        let total = b.run + b.migration + b.wait_idle_present + b.wait_no_resources;
        prop_assert!((total - o.turnaround()).abs() < 1e-6);
    }
    // No kind is ever over-committed: check at every start.
    for &(kind, t, _, _) in &use_of {
        let used: u32 = use_of
            .iter()
            .filter(|u| u.0 == kind && u.1 <= t && t < u.2)
            .map(|u| u.3)
            .sum();
        prop_assert!(
            used <= m.units[kind],
            "kind {} holds {} at {}",
            kind,
            used,
            t
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]
    #[test]
    fn every_policy_finishes_every_job_without_overcommit(
        specs in proptest::collection::vec((0u32..200, 0u32..3, 5u32..120, 1u32..8), 1..30),
        policy in 0usize..4,
        overestimate in any::<bool>(),
    ) {
        let jobs: Vec<HeteroJob> = specs
            .iter()
            .enumerate()
            .map(|(i, &(at, log, run, x))| job(i as u64 + 1, f64::from(at), 1 << log, f64::from(run), f64::from(x)))
            .collect();
        // Planning with 3x the real cost must still execute exactly (work conserved, no
        // overlap), only sooner than planned.
        let mut m = machine(4, 4);
        if overestimate {
            for k in &mut m.predicted.kinds {
                k.checkpoint_fixed = 3.0;
                k.restart_fixed = 3.0;
            }
        }
        check_invariants(&jobs, m, HeteroPolicy::ALL[policy])?;
    }
}

#[test]
fn a_system_load_counts_the_slow_pool_at_its_mean_share_of_a_fast_ones_speed() {
    use ninf_sim::hetero::{LoadBasis, SizeMix, seed002};
    let fast = seed002(
        SizeMix::Small,
        2000,
        512,
        512,
        (0.9, LoadBasis::FastPool),
        7,
    );
    let system = seed002(SizeMix::Small, 2000, 512, 512, (0.9, LoadBasis::System), 7);
    // The same jobs, arriving 1 + ln 10 / 9 times as often.
    let ratio = fast[1999].submit / system[1999].submit;
    assert!((ratio - (1.0 + 10f64.ln() / 9.0)).abs() < 1e-9, "{ratio}");
    assert_eq!(fast[5].resources, system[5].resources);
    assert_eq!(fast[5].slow_run, system[5].slow_run);
    assert_eq!("system".parse::<LoadBasis>(), Ok(LoadBasis::System));
    assert!(
        "both"
            .parse::<LoadBasis>()
            .unwrap_err()
            .contains("fast, system")
    );
}

#[test]
fn the_even_large_mix_draws_every_power_of_two_alike() {
    use ninf_sim::hetero::{LoadBasis, SizeMix, seed002};
    let jobs = seed002(
        SizeMix::LargeEven,
        20_000,
        512,
        512,
        (0.9, LoadBasis::FastPool),
        3,
    );
    let mut counts = std::collections::BTreeMap::new();
    for j in &jobs {
        *counts.entry(j.resources).or_insert(0usize) += 1;
    }
    let sizes: Vec<u32> = counts.keys().copied().collect();
    assert_eq!(sizes, (0..10).map(|k| 1u32 << k).collect::<Vec<_>>());
    // 2,000 expected of each; a binomial's spread is about 42.
    assert!(
        counts.values().all(|&c| (1_800..=2_200).contains(&c)),
        "{counts:?}"
    );
    // Mean 1023 / 10: arrivals come 342 / 102.3 times as often as for `Large` at one load.
    let large = seed002(
        SizeMix::Large,
        20_000,
        512,
        512,
        (0.9, LoadBasis::FastPool),
        3,
    );
    let mean = |js: &[ninf_sim::hetero::HeteroJob]| js[19_999].submit / 20_000.0;
    let ratio = mean(&large) / mean(&jobs);
    assert!((2.9..3.8).contains(&ratio), "{ratio}");
}
