//! Forecasting a measured series as the Network Weather Service does: keep several simple
//! forecasters, score each on the measurements that arrived after its forecasts, and answer
//! with the one whose recent error is lowest.

use std::collections::VecDeque;

/// One way of forecasting the next value from the past ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    LastValue,
    RunningMean { sum: f64, count: u64 },
    ExponentialSmoothing { gain: f64, state: Option<f64> },
    SlidingMedian { window: usize },
}

impl Method {
    pub fn name(&self) -> String {
        match self {
            Method::LastValue => "last value".into(),
            Method::RunningMean { .. } => "running mean".into(),
            Method::ExponentialSmoothing { gain, .. } => format!("exponential smoothing {gain}"),
            Method::SlidingMedian { window } => format!("sliding median {window}"),
        }
    }

    fn forecast(&self, history: &VecDeque<f64>) -> Option<f64> {
        match self {
            Method::LastValue => history.back().copied(),
            Method::RunningMean { sum, count } => (*count > 0).then(|| sum / *count as f64),
            Method::ExponentialSmoothing { state, .. } => *state,
            Method::SlidingMedian { window } => {
                let mut recent: Vec<f64> = history.iter().rev().take(*window).copied().collect();
                if recent.is_empty() {
                    return None;
                }
                recent.sort_by(f64::total_cmp);
                let mid = recent.len() / 2;
                Some(if recent.len() % 2 == 1 {
                    recent[mid]
                } else {
                    (recent[mid - 1] + recent[mid]) / 2.0
                })
            }
        }
    }

    fn update(&mut self, value: f64) {
        match self {
            Method::LastValue | Method::SlidingMedian { .. } => {}
            Method::RunningMean { sum, count } => {
                *sum += value;
                *count += 1;
            }
            Method::ExponentialSmoothing { gain, state } => {
                *state = Some(match *state {
                    Some(s) => s + *gain * (value - s),
                    None => value,
                });
            }
        }
    }
}

/// Keeps a series and forecasts its next value with the best recent method.
#[derive(Debug, Clone)]
pub struct Forecaster {
    methods: Vec<Method>,
    /// Recent absolute errors of each method, oldest first.
    errors: Vec<VecDeque<f64>>,
    history: VecDeque<f64>,
    error_window: usize,
    history_limit: usize,
}

impl Default for Forecaster {
    /// The methods from most to least conservative: when their recent errors tie (a series
    /// that was constant until now), the conservative one answers, so one outlier does not
    /// become the forecast.
    fn default() -> Self {
        Forecaster::new(vec![
            Method::SlidingMedian { window: 21 },
            Method::RunningMean { sum: 0.0, count: 0 },
            Method::ExponentialSmoothing {
                gain: 0.05,
                state: None,
            },
            Method::ExponentialSmoothing {
                gain: 0.1,
                state: None,
            },
            Method::SlidingMedian { window: 5 },
            Method::ExponentialSmoothing {
                gain: 0.3,
                state: None,
            },
            Method::ExponentialSmoothing {
                gain: 0.5,
                state: None,
            },
            Method::LastValue,
        ])
    }
}

impl Forecaster {
    /// A forecaster over `methods`, scored on their last 10 errors.
    pub fn new(methods: Vec<Method>) -> Forecaster {
        let errors = vec![VecDeque::new(); methods.len()];
        Forecaster {
            methods,
            errors,
            history: VecDeque::new(),
            error_window: 10,
            history_limit: 64,
        }
    }

    /// Adds a measurement: first scores every method's forecast of it, then updates them.
    pub fn observe(&mut self, value: f64) {
        if !value.is_finite() {
            return;
        }
        for (method, errors) in self.methods.iter().zip(&mut self.errors) {
            if let Some(forecast) = method.forecast(&self.history) {
                errors.push_back((forecast - value).abs());
                if errors.len() > self.error_window {
                    errors.pop_front();
                }
            }
        }
        for method in &mut self.methods {
            method.update(value);
        }
        self.history.push_back(value);
        if self.history.len() > self.history_limit {
            self.history.pop_front();
        }
    }

    /// Index of the method with the lowest mean recent error (the first on ties).
    fn best(&self) -> Option<usize> {
        let scored = self
            .errors
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty());
        let mean = |e: &VecDeque<f64>| e.iter().sum::<f64>() / e.len() as f64;
        scored
            .min_by(|(i, a), (j, b)| mean(a).total_cmp(&mean(b)).then(i.cmp(j)))
            .map(|(i, _)| i)
            .or_else(|| (!self.history.is_empty()).then_some(0))
    }

    /// The forecast of the next value; `None` before any measurement.
    pub fn forecast(&self) -> Option<f64> {
        self.methods[self.best()?].forecast(&self.history)
    }

    /// Name of the method that answers now.
    pub fn best_method(&self) -> Option<String> {
        self.best().map(|i| self.methods[i].name())
    }

    /// A forecaster fed with a whole series.
    pub fn from_series(series: &[f64]) -> Forecaster {
        let mut f = Forecaster::default();
        for &v in series {
            f.observe(v);
        }
        f
    }
}
