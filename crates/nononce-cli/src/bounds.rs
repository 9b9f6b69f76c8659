//! `nononce bounds`: the smallest and largest nonce of a time range, for `BETWEEN` scans of
//! sortable nonces.

use nononce::nonce::{BoundsError, DEFAULT_EPOCH_MS, RangeEnd};
use nononce::{Nonce64, Nonce96, Nonce128};

use crate::codec::{AnyNonce, Format};
use crate::output::Exit;

pub const EXAMPLES: &str = "Examples:
  nononce bounds --from 2026-12-01T10:00:00Z --to 2026-12-01T11:00:00Z
  nononce bounds --from 2026-12-01T10:00:00Z --to 2026-12-01T10:00:00Z --format int | head -1    # prints 253460112998400000
  nononce bounds --from 2026-12-01T11:00:00+01:00 --to 2026-12-01T11:59:59.999+01:00 --bits 128

The first line is the smallest nonce whose timestamp lies in [--from, --to], both ends
included, the second the largest: `WHERE id BETWEEN lo AND hi` selects the nonces of that time.
Times are RFC 3339 with a `Z` or an offset, rounded inward to whole milliseconds. Store 64-bit
nonces as integers (--format int; a signed BIGINT holds them until 2094-09-07 with the default
epoch) and 96/128-bit ones as their big-endian bytes (BYTEA, BLOB, BINARY(12/16); --format hex
gives them): both compare in the nonces' order. A sortable nonce carries the millisecond it was
made in, or a later one where its factory ran ahead of the clock (past 4,194,304 96/128-bit
nonces in a millisecond, or just after its machine ID was handed over): see docs/interop.md.";

#[derive(Debug, clap::Args)]
pub struct BoundsArgs {
    /// The range's start, RFC 3339 (2026-12-01T10:00:00Z); included.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from: Time,
    /// The range's end, RFC 3339; included.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    to: Time,
    /// Nonce size in bits: 64, 96 or 128.
    #[arg(long, default_value_t = 64, value_parser = crate::codec::parse_bits)]
    bits: u16,
    /// The epoch the nonces' timestamps count from, in Unix ms (that of the factory that made
    /// them).
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Hex)]
    format: Format,
}

/// A time as given on the command line, and its instant in nanoseconds since 1970.
#[derive(Debug, Clone)]
struct Time {
    text: String,
    unix_ns: i128,
}

fn parse_time(text: &str) -> Result<Time, String> {
    let parsed =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .map_err(|e| {
                format!("not an RFC 3339 time ({e}): write it like 2026-12-01T10:00:00Z, or with an offset like 2026-12-01T11:00:00+01:00")
            })?;
    Ok(Time {
        text: text.to_owned(),
        unix_ns: parsed.unix_timestamp_nanos(),
    })
}

const NS_PER_MS: i128 = 1_000_000;

pub fn run(args: &BoundsArgs) -> Result<(), Exit> {
    let usage = |message: String| Exit::Usage(message);
    // Inward: a nonce's timestamp is a whole millisecond, in the range only when at or after
    // the start and at or before the end.
    let from_ms = args.from.unix_ns.div_euclid(NS_PER_MS)
        + i128::from(args.from.unix_ns.rem_euclid(NS_PER_MS) != 0);
    let to_ms = args.to.unix_ns.div_euclid(NS_PER_MS);
    if args.from.unix_ns > args.to.unix_ns {
        return Err(usage(format!(
            "--from {} is after --to {}: give the earlier time as --from",
            args.from.text, args.to.text
        )));
    }
    if from_ms > to_ms {
        return Err(usage(format!(
            "no whole millisecond lies between --from {} and --to {}, and nonce timestamps are whole milliseconds: widen the range",
            args.from.text, args.to.text
        )));
    }
    // Before 1970 is before any epoch; past `u64` is past any nonce's time.
    let unix_ms = |ms: i128| u64::try_from(ms.max(0)).unwrap_or(u64::MAX);
    let range = if from_ms < 0 {
        Err(BoundsError::BeforeEpoch {
            end: RangeEnd::From,
            unix_ms: 0,
            epoch_ms: args.epoch_ms,
        })
    } else {
        let (from, to) = (unix_ms(from_ms), unix_ms(to_ms));
        match args.bits {
            64 => Nonce64::bounds(from, to, args.epoch_ms)
                .map(|r| (AnyNonce::N64(*r.start()), AnyNonce::N64(*r.end()))),
            96 => Nonce96::bounds(from, to, args.epoch_ms)
                .map(|r| (AnyNonce::N96(*r.start()), AnyNonce::N96(*r.end()))),
            _ => Nonce128::bounds(from, to, args.epoch_ms)
                .map(|r| (AnyNonce::N128(*r.start()), AnyNonce::N128(*r.end()))),
        }
    };
    let (lo, hi) = range.map_err(|e| usage(explain(&e, args)))?;
    crate::output::print(&format!(
        "{}\n{}",
        lo.format(args.format),
        hi.format(args.format)
    ))
}

/// A refused range in the command's terms: the option, what is wrong, what to give instead.
fn explain(e: &BoundsError, args: &BoundsArgs) -> String {
    let shown = |unix_ms: u64| {
        crate::codec::rfc3339(unix_ms).unwrap_or_else(|| format!("{unix_ms} (Unix ms)"))
    };
    let given = |end: RangeEnd| match end {
        RangeEnd::From => &args.from.text,
        RangeEnd::To => &args.to.text,
    };
    match *e {
        BoundsError::BeforeEpoch { end, epoch_ms, .. } => format!(
            "--{} {} is before the epoch {} (--epoch-ms {epoch_ms}), and no nonce carries an earlier time: give a --{} at or after the epoch, or the --epoch-ms the nonces were made with",
            end.name(),
            given(end),
            shown(epoch_ms),
            end.name()
        ),
        BoundsError::PastMaxTimestamp {
            end, last_unix_ms, ..
        } => format!(
            "--{} {} is past {}, the last millisecond a nonce carries from --epoch-ms {} (42 bits of milliseconds): give an earlier --{}, or the --epoch-ms the nonces were made with",
            end.name(),
            given(end),
            shown(last_unix_ms),
            args.epoch_ms,
            end.name()
        ),
        // Checked above, before the library's own check; any other refusal in its words.
        _ => format!("--from {} --to {}: {e}", args.from.text, args.to.text),
    }
}
