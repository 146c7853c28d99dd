//! `ninf call ROUTINE VALUES...`: one call from the shell through the grid's proxy. Values
//! are given for the IN and INOUT parameters in order: a number for a scalar, a JSON list
//! for an array (flattened, column-major), or `random` for an array of random numbers of the
//! size the IDL gives. OUT arrays are allocated from the IDL. The results print as JSON.

use std::collections::BTreeMap;

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use ninf::grid::GridClient;
use ninf::{Arg, ArrayMut, ArrayRef};
use ninf_grid::embedded::Endpoints;
use ninf_idl::{ElementType, Mode};
use ninf_proto::ArrayData;

fn array_from_json(element_type: ElementType, text: &str, len: usize) -> anyhow::Result<ArrayData> {
    let values: Vec<f64> = serde_json::from_str(text)
        .with_context(|| format!("`{text}` is not a JSON list of numbers"))?;
    if values.len() != len {
        bail!("expected {len} elements, got {}", values.len());
    }
    let mut array = ArrayData::zeroed(element_type, len)?;
    match &mut array {
        ArrayData::Double(v) => v.copy_from_slice(&values),
        ArrayData::Float(v) => v.iter_mut().zip(&values).for_each(|(d, s)| *d = *s as f32),
        ArrayData::Int(v) => v.iter_mut().zip(&values).for_each(|(d, s)| *d = *s as i32),
        ArrayData::Long(v) => v.iter_mut().zip(&values).for_each(|(d, s)| *d = *s as i64),
        ArrayData::Short(v) => v.iter_mut().zip(&values).for_each(|(d, s)| *d = *s as i16),
        ArrayData::Char(v) => v.iter_mut().zip(&values).for_each(|(d, s)| *d = *s as u8),
        _ => bail!("complex arrays cannot be given on the command line"),
    }
    Ok(array)
}

fn random_array(element_type: ElementType, len: usize) -> anyhow::Result<ArrayData> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let values: Vec<f64> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect();
    array_from_json(element_type, &serde_json::to_string(&values)?, len)
}

fn to_json(array: &ArrayData) -> serde_json::Value {
    match array {
        ArrayData::Double(v) => serde_json::json!(v),
        ArrayData::Float(v) => serde_json::json!(v),
        ArrayData::Int(v) => serde_json::json!(v),
        ArrayData::Long(v) => serde_json::json!(v),
        ArrayData::Short(v) => serde_json::json!(v),
        ArrayData::Char(v) => serde_json::json!(v),
        ArrayData::Scomplex(v) => {
            serde_json::json!(v.iter().map(|c| [c.re, c.im]).collect::<Vec<_>>())
        }
        ArrayData::Dcomplex(v) => {
            serde_json::json!(v.iter().map(|c| [c.re, c.im]).collect::<Vec<_>>())
        }
    }
}

/// Runs `function` with the given values; returns the JSON to print.
fn call(
    proxy: &str,
    token: Option<&str>,
    tls: Option<&ninf_proto::net::tls::GridTls>,
    function: &str,
    values: &[String],
) -> anyhow::Result<serde_json::Value> {
    let mut grid = GridClient::connect_with_tls(proxy, tls)?;
    if let Some(token) = token {
        grid = grid.with_token(token);
    }
    let interface = grid.describe(function)?;
    let given: Vec<usize> = interface
        .parameters
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.mode, Mode::In | Mode::InOut))
        .map(|(i, _)| i)
        .collect();
    if values.len() != given.len() {
        let names: Vec<&str> = given
            .iter()
            .map(|&i| interface.parameters[i].name.as_str())
            .collect();
        bail!(
            "`{function}` needs {} values ({}), got {}",
            given.len(),
            names.join(", "),
            values.len()
        );
    }
    // Scalars first: array sizes depend on them.
    let mut bindings = BTreeMap::new();
    let mut scalars = BTreeMap::new();
    for (&i, text) in given.iter().zip(values) {
        let p = &interface.parameters[i];
        if p.is_array() {
            continue;
        }
        let value: f64 = text
            .parse()
            .with_context(|| format!("`{}` must be a number, got `{text}`", p.name))?;
        if p.element_type.is_integer() {
            if value.fract() != 0.0 {
                bail!("`{}` must be an integer, got `{text}`", p.name);
            }
            bindings.insert(p.name.clone(), value as i64);
        }
        scalars.insert(i, value);
    }
    let mut arrays: BTreeMap<usize, ArrayData> = BTreeMap::new();
    for (i, p) in interface.parameters.iter().enumerate() {
        if !p.is_array() || p.mode == Mode::Work {
            continue;
        }
        let len = usize::try_from(interface.element_count(p, &bindings)?)?;
        let array = match given.iter().position(|&g| g == i) {
            Some(k) if values[k] == "random" => random_array(p.element_type, len)?,
            Some(k) => array_from_json(p.element_type, &values[k], len)
                .with_context(|| format!("argument `{}`", p.name))?,
            None => ArrayData::zeroed(p.element_type, len)?,
        };
        arrays.insert(i, array);
    }
    let outcome = {
        let mut slots: BTreeMap<usize, &mut ArrayData> =
            arrays.iter_mut().map(|(i, a)| (*i, a)).collect();
        let mut args: Vec<Arg<'_>> = Vec::new();
        for (i, p) in interface.parameters.iter().enumerate() {
            args.push(match (p.mode, slots.remove(&i)) {
                (Mode::Work, _) => Arg::Work,
                (Mode::In, Some(a)) => Arg::In(ArrayRef::from(&*a)),
                (_, Some(a)) => Arg::Out(ArrayMut::from(a)),
                (_, None) => {
                    let v = scalars.get(&i).copied().unwrap_or(0.0);
                    if p.element_type.is_integer() {
                        Arg::Integer(v as i64)
                    } else {
                        Arg::Real(v)
                    }
                }
            });
        }
        grid.call(function, &mut args)?
    };
    let mut outputs = serde_json::Map::new();
    for (i, p) in interface.parameters.iter().enumerate() {
        if matches!(p.mode, Mode::Out | Mode::InOut)
            && let Some(a) = arrays.get(&i)
        {
            outputs.insert(p.name.clone(), to_json(a));
        }
    }
    Ok(serde_json::json!({ "function": function, "status": outcome.status, "outputs": outputs }))
}

#[derive(Args)]
pub struct CallArgs {
    pub routine: String,
    pub values: Vec<String>,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Wait up to this many seconds for the grid to be up and serve the routine (a grid
    /// `ninf up` is still starting), instead of failing at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub wait: f64,
}

/// Waits until the grid file in `data_dir` exists and its proxy knows `routine`, for up to
/// `seconds`; the last failure if it never does.
fn wait_for(data_dir: &std::path::Path, routine: &str, seconds: f64) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
    loop {
        let attempt = (|| -> anyhow::Result<()> {
            let endpoints = Endpoints::read(data_dir)?;
            let mut grid =
                GridClient::connect_with_tls(&endpoints.proxy, endpoints.tls()?.as_ref())?;
            if let Some(token) = endpoints.token()? {
                grid = grid.with_token(&token);
            }
            grid.describe(routine)?;
            Ok(())
        })();
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(e.context(format!(
                    "the grid did not serve `{routine}` within {seconds} s"
                )));
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

pub fn run(args: CallArgs) -> anyhow::Result<()> {
    if !(args.wait >= 0.0 && args.wait.is_finite()) {
        bail!("--wait must be a number of seconds, got {}", args.wait);
    }
    let data_dir = args.data_dir.unwrap_or_else(ninf_grid::default_data_dir);
    if args.wait > 0.0 {
        wait_for(&data_dir, &args.routine, args.wait)?;
    }
    let endpoints = Endpoints::read(&data_dir)?;
    let token = endpoints.token()?;
    let tls = endpoints.tls()?;
    let result = call(
        &endpoints.proxy,
        token.as_deref(),
        tls.as_ref(),
        &args.routine,
        &args.values,
    )?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(())
}
