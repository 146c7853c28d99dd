//! `ninf load --stall-seconds`, as docs/reliability.md ("Many clients") writes it: a
//! transaction unanswered past the limit stops the run with an error naming it, and the
//! grid's files are kept where the error says; a limit that is not a positive number of
//! seconds is refused before anything starts. `--predictor` sets the metaserver's predictor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use crate::common::ninf;

#[test]
fn a_run_past_its_stall_limit_names_the_transactions_and_keeps_the_grids_files() {
    // `ninf load` starts the grid's programs found next to `ninf`.
    common::programs::build();
    // Every transaction takes longer than a millisecond, so the first look at the clients
    // finds one past the limit.
    let output = Command::new(ninf())
        .args(["load", "--clients", "4", "--transactions", "200"])
        .args(["--stall-seconds", "0.001"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the run stalled: client ") && stderr.contains(" unanswered after "),
        "{stderr}"
    );
    let kept = stderr
        .lines()
        .find_map(|line| line.strip_prefix("Error: the grid's files are kept in "))
        .map(|dir| PathBuf::from(dir.trim()))
        .unwrap_or_else(|| panic!("no directory named: {stderr}"));
    let metaserver_db = kept.join("metaserver").join("metaserver.db");
    let journal = kept.join("ninf-proxy-journal.sqlite");
    let (db_kept, journal_kept) = (metaserver_db.exists(), journal.exists());
    std::fs::remove_dir_all(&kept).unwrap();
    assert!(db_kept, "{} is missing", metaserver_db.display());
    assert!(journal_kept, "{} is missing", journal.display());
}

#[test]
fn a_stall_limit_that_is_not_a_positive_number_of_seconds_is_refused() {
    for limit in ["0", "-1"] {
        let output = Command::new(ninf())
            .args(["load", "--clients", "1", "--transactions", "1"])
            .arg(format!("--stall-seconds={limit}"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(
            stderr.contains(&format!(
                "--stall-seconds must be a positive number of seconds, not {limit}"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn the_predictor_named_is_the_metaserver_s_and_an_unknown_one_is_refused() {
    common::programs::build();
    // Stopped at its first look, as above: the grid ran (its metaserver took the setting)
    // and its files are kept to read.
    let output = Command::new(ninf())
        .args(["load", "--clients", "2", "--transactions", "200"])
        .args(["--predictor", "capacity", "--stall-seconds", "0.001"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the run stalled: client "), "{stderr}");
    let kept = stderr
        .lines()
        .find_map(|line| line.strip_prefix("Error: the grid's files are kept in "))
        .map(|dir| PathBuf::from(dir.trim()))
        .unwrap_or_else(|| panic!("no directory named: {stderr}"));
    let config = std::fs::read_to_string(kept.join("metaserver.toml")).unwrap();
    std::fs::remove_dir_all(&kept).unwrap();
    assert!(
        config.lines().any(|l| l == "predictor = \"capacity\""),
        "{config}"
    );
    let output = Command::new(ninf())
        .args(["load", "--predictor", "newest"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("invalid value 'newest' for '--predictor")
            && stderr.contains("[possible values: latest, forecast, capacity]"),
        "{stderr}"
    );
}
