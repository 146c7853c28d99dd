//! `ninf demo --predictor`, as the README writes it: the demo runs its workloads with the
//! predictor named, checked against the routines run locally, and an unknown name is
//! refused with the ones there are.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use crate::common::ninf;

#[test]
fn the_demo_runs_with_the_predictor_named_and_refuses_an_unknown_one() {
    common::programs::build();
    let output = Command::new(ninf())
        .args(["demo", "--json", "--predictor", "capacity", "--trials", "1"])
        .args([
            "--pairs-n",
            "40",
            "--cascade-n",
            "40",
            "--schedulers",
            "flow",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let workloads: Vec<String> = stdout
        .lines()
        .map(|line| {
            let result: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(result["max_abs_error"], 0.0, "{line}");
            assert!(result["prediction_error_median"].is_number(), "{line}");
            result["workload"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(workloads, ["pairs", "cascade"], "{stdout}");
    let output = Command::new(ninf())
        .args(["demo", "--predictor", "newest"])
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
