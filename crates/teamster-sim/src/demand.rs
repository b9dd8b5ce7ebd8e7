//! Demand curves: the rate a port offers as a function of simulated time.
//!
//! - `constant`: `rate` at all times.
//! - `ramp`: `from` until `start_s`, linear to `to` at `end_s`, `to` afterwards.
//! - `step`: `before` until `at_s`, `after` from then on.
//! - `on-off`: `rate` for `on_s`, zero for `off_s`, repeating, shifted by `offset_s`.
//! - `csv`: piecewise linear through the points of a CSV file with columns `t_s` and `rate`
//!   (a bandwidth such as `2.5G` or bits/s); held constant before the first and after the last.
//! - `points`: the same through `points = [[t_s, bits/s], ...]` in the scenario itself (what a
//!   what-if writes from the switch's measured rates, so that its scenario stands alone).

use serde::Deserialize;
use teamster_core::units::Bandwidth;

/// A demand curve as written in a scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DemandSpec {
    Constant {
        rate: Bandwidth,
    },
    Ramp {
        from: Bandwidth,
        to: Bandwidth,
        start_s: f64,
        end_s: f64,
    },
    Step {
        before: Bandwidth,
        after: Bandwidth,
        at_s: f64,
    },
    OnOff {
        rate: Bandwidth,
        on_s: f64,
        off_s: f64,
        #[serde(default)]
        offset_s: f64,
    },
    Csv {
        file: String,
    },
    Points {
        points: Vec<[f64; 2]>,
    },
}

/// A curve ready to evaluate (CSV points loaded).
#[derive(Debug, Clone, PartialEq)]
pub enum Demand {
    Constant(f64),
    Ramp { from: f64, to: f64, start: f64, end: f64 },
    Step { before: f64, after: f64, at: f64 },
    OnOff { rate: f64, on: f64, off: f64, offset: f64 },
    Piecewise(Vec<(f64, f64)>),
}

impl Demand {
    /// Offered bits/s at time `t` seconds.
    pub fn at(&self, t: f64) -> f64 {
        match self {
            Demand::Constant(r) => *r,
            Demand::Ramp { from, to, start, end } => {
                if t <= *start {
                    *from
                } else if t >= *end {
                    *to
                } else {
                    from + (to - from) * (t - start) / (end - start)
                }
            }
            Demand::Step { before, after, at } => {
                if t < *at {
                    *before
                } else {
                    *after
                }
            }
            Demand::OnOff { rate, on, off, offset } => {
                let phase = (t - offset).rem_euclid(on + off);
                if t >= *offset && phase < *on {
                    *rate
                } else {
                    0.0
                }
            }
            Demand::Piecewise(points) => piecewise(points, t),
        }
    }
}

/// Linear interpolation through sorted `(t, rate)` points, flat outside them.
fn piecewise(points: &[(f64, f64)], t: f64) -> f64 {
    let i = points.partition_point(|&(pt, _)| pt <= t);
    match (i.checked_sub(1).map(|j| points[j]), points.get(i)) {
        (None, Some(&(_, r))) | (Some((_, r)), None) => r,
        (Some((t0, r0)), Some(&(t1, r1))) => r0 + (r1 - r0) * (t - t0) / (t1 - t0),
        (None, None) => 0.0,
    }
}

impl DemandSpec {
    /// Checks the curve's numbers and loads a CSV curve; `load` reads a file relative to the
    /// scenario. Errors say what is wrong without the key, which the caller adds.
    pub fn build(&self, load: &dyn Fn(&str) -> Result<String, String>) -> Result<Demand, String> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(format!("{name} = {v}: expected a non-negative number of seconds"))
            }
        };
        Ok(match self {
            DemandSpec::Constant { rate } => Demand::Constant(rate.bps_f64()),
            DemandSpec::Ramp {
                from,
                to,
                start_s,
                end_s,
            } => {
                let (start, end) = (finite("start_s", *start_s)?, finite("end_s", *end_s)?);
                if end <= start {
                    return Err(format!("end_s ({end}) must be after start_s ({start})"));
                }
                Demand::Ramp {
                    from: from.bps_f64(),
                    to: to.bps_f64(),
                    start,
                    end,
                }
            }
            DemandSpec::Step { before, after, at_s } => Demand::Step {
                before: before.bps_f64(),
                after: after.bps_f64(),
                at: finite("at_s", *at_s)?,
            },
            DemandSpec::OnOff {
                rate,
                on_s,
                off_s,
                offset_s,
            } => {
                let (on, off) = (finite("on_s", *on_s)?, finite("off_s", *off_s)?);
                if on + off <= 0.0 {
                    return Err("on_s + off_s must be greater than zero".into());
                }
                Demand::OnOff {
                    rate: rate.bps_f64(),
                    on,
                    off,
                    offset: finite("offset_s", *offset_s)?,
                }
            }
            DemandSpec::Csv { file } => Demand::Piecewise(parse_csv(file, &load(file)?)?),
            DemandSpec::Points { points } => {
                let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len());
                for (i, [t, rate]) in points.iter().copied().enumerate() {
                    if !t.is_finite() || out.last().is_some_and(|&(pt, _)| t <= pt) {
                        return Err(format!("points[{i}]: t_s {t} is not a time after the previous point's"));
                    }
                    if !(rate.is_finite() && rate >= 0.0) {
                        return Err(format!("points[{i}]: rate {rate}: expected bits/s, 0 or more"));
                    }
                    out.push((t, rate));
                }
                if out.is_empty() {
                    return Err("points: none".into());
                }
                Demand::Piecewise(out)
            }
        })
    }
}

/// Reads `t_s,rate` rows; times must be finite and strictly increasing.
fn parse_csv(file: &str, text: &str) -> Result<Vec<(f64, f64)>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = reader.headers().map_err(|e| format!("{file}: {e}"))?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{file}: no `{name}` column (expected header `t_s,rate`)"))
    };
    let (ti, ri) = (col("t_s")?, col("rate")?);
    let mut points: Vec<(f64, f64)> = Vec::new();
    for (n, row) in reader.records().enumerate() {
        let line = n + 2;
        let row = row.map_err(|e| format!("{file}:{line}: {e}"))?;
        let t: f64 = row
            .get(ti)
            .and_then(|s| s.parse().ok())
            .filter(|t: &f64| t.is_finite())
            .ok_or_else(|| format!("{file}:{line}: t_s must be a number of seconds"))?;
        let rate: Bandwidth = row
            .get(ri)
            .unwrap_or("")
            .parse()
            .map_err(|e| format!("{file}:{line}: rate: {e}"))?;
        if points.last().is_some_and(|&(pt, _)| t <= pt) {
            return Err(format!("{file}:{line}: t_s {t} is not after the previous row's"));
        }
        points.push((t, rate.bps_f64()));
    }
    if points.is_empty() {
        return Err(format!("{file}: no rows"));
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(_: &str) -> Result<String, String> {
        Err("no files here".into())
    }

    #[test]
    fn inline_points_are_a_piecewise_curve_and_bad_ones_are_refused() {
        let d = DemandSpec::Points {
            points: vec![[0.0, 1e9], [10.0, 2e9]],
        }
        .build(&no_files)
        .unwrap();
        assert_eq!(d.at(5.0), 1.5e9);
        assert_eq!(d.at(20.0), 2e9);
        for bad in [
            vec![],
            vec![[1.0, 1e9], [1.0, 2e9]],
            vec![[0.0, -1.0]],
            vec![[f64::NAN, 1.0]],
        ] {
            let e = DemandSpec::Points { points: bad.clone() }.build(&no_files).unwrap_err();
            assert!(e.contains("points"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn curves_evaluate_as_documented() {
        let ramp = Demand::Ramp {
            from: 1.0,
            to: 3.0,
            start: 10.0,
            end: 20.0,
        };
        assert_eq!((ramp.at(0.0), ramp.at(15.0), ramp.at(99.0)), (1.0, 2.0, 3.0));
        let step = Demand::Step {
            before: 1.0,
            after: 5.0,
            at: 3.0,
        };
        assert_eq!((step.at(2.9), step.at(3.0)), (1.0, 5.0));
        let oo = Demand::OnOff {
            rate: 7.0,
            on: 2.0,
            off: 3.0,
            offset: 1.0,
        };
        let v: Vec<f64> = (0..8).map(|t| oo.at(f64::from(t))).collect();
        assert_eq!(v, [0.0, 7.0, 7.0, 0.0, 0.0, 0.0, 7.0, 7.0]);
    }

    #[test]
    fn csv_curves_interpolate_and_reject_bad_rows() {
        let load = |_: &str| Ok("t_s,rate\n0,1G\n10,2G\n20, 500M\n".to_string());
        let d = DemandSpec::Csv { file: "x.csv".into() }.build(&load).unwrap();
        assert_eq!(
            (d.at(-5.0), d.at(5.0), d.at(15.0), d.at(100.0)),
            (1e9, 1.5e9, 1.25e9, 5e8)
        );
        for bad in [
            "t_s,rate\n0,1G\n0,2G\n",
            "t,rate\n0,1G\n",
            "t_s,rate\n0,10GB\n",
            "t_s,rate\nx,1G\n",
            "t_s,rate\n",
        ] {
            let load = |_: &str| Ok(bad.to_string());
            let err = DemandSpec::Csv { file: "x.csv".into() }.build(&load).unwrap_err();
            assert!(err.starts_with("x.csv"), "{err}");
        }
        assert!(DemandSpec::Csv { file: "y.csv".into() }.build(&no_files).is_err());
    }

    #[test]
    fn bad_numbers_are_rejected() {
        let ramp = DemandSpec::Ramp {
            from: Bandwidth::ZERO,
            to: Bandwidth::ZERO,
            start_s: 5.0,
            end_s: 5.0,
        };
        assert!(ramp.build(&no_files).unwrap_err().contains("end_s"));
        let oo = DemandSpec::OnOff {
            rate: Bandwidth::ZERO,
            on_s: f64::NAN,
            off_s: 1.0,
            offset_s: 0.0,
        };
        assert!(oo.build(&no_files).unwrap_err().contains("on_s"));
    }
}
