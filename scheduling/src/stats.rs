//! The two summaries the predictors and the reports of predictions share: the median, and
//! the constant with the least mean relative error. Pure functions over figures.

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The constant `c` minimising the mean of `|c - a| / a` over `values` (all positive):
/// their median weighted by `1 / a`. `None` when empty.
pub fn least_relative_error(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let half = values.iter().map(|a| 1.0 / a).sum::<f64>() / 2.0;
    let mut total = 0.0;
    for &a in &values {
        total += 1.0 / a;
        if total >= half {
            return Some(a);
        }
    }
    values.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn the_least_relative_error_leans_to_the_small_values() {
        assert_eq!(least_relative_error(vec![]), None);
        // Weights 1, 1/2, 1/8: half the total (0.8125) is reached at the first value.
        assert_eq!(least_relative_error(vec![8.0, 1.0, 2.0]), Some(1.0));
        // Equal values: that value.
        assert_eq!(least_relative_error(vec![5.0; 4]), Some(5.0));
        // 1 and 3: weights 1 and 1/3, half (2/3) reached at 1; the plain median says 2.
        assert_eq!(least_relative_error(vec![3.0, 1.0]), Some(1.0));
    }
}
