//! COPY FROM STDIN's text and CSV parser, with options as a client can
//! write them. The first five bytes choose the format, the delimiter, the
//! quote, the escape, the NULL string and how the rest arrives in CopyData
//! chunks; the rest is the data. Must hold:
//! - an answer or an error, never a panic;
//! - chunking changes nothing: records and errors are the same whether
//!   the data arrives whole or in chunks of any size;
//! - what COPY TO would write for the parsed records parses back to the
//!   same records (the encoder and the parser agree on every format the
//!   options accept).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqlparser::ast::{CopyOption, Ident};
use tablegate_gateway::handler::copy::format::{CopyFormat, Field, Format, Parser};

const CHARS: &[char] = &[
    ',', '\t', '|', ';', ' ', '"', '\'', '\\', 'x', '.', '\n', '\r', 'é', '\0', '#',
];
const NULLS: &[&str] = &["\\N", "", "NULL", "a,b", "\"", "x\ny", "\\"];

/// Records until the end or the first error (its SQLSTATE).
type Outcome = (Vec<(u64, Vec<Field>)>, Option<&'static str>);

fn parse(fmt: &CopyFormat, data: &[u8], chunk: usize) -> Outcome {
    let mut p = Parser::new(fmt.clone());
    let mut records = Vec::new();
    let chunk = if chunk == 0 { data.len().max(1) } else { chunk };
    for piece in data.chunks(chunk) {
        p.feed(piece);
        loop {
            match p.next_record(false) {
                Ok(Some(r)) => records.push(r),
                Ok(None) => break,
                Err(e) => return (records, Some(code(e.code))),
            }
        }
    }
    loop {
        match p.next_record(true) {
            Ok(Some(r)) => records.push(r),
            Ok(None) => return (records, None),
            Err(e) => return (records, Some(code(e.code))),
        }
    }
}

/// A static SQLSTATE (the outcome is compared, not printed).
fn code(c: &str) -> &'static str {
    match c {
        "22P04" => "22P04",
        "22021" => "22021",
        "54000" => "54000",
        _ => panic!("unexpected SQLSTATE {c} from the COPY parser"),
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, delim, quote, escape, chunk, rest @ ..] = data else {
        return;
    };
    let pick = |b: u8| CHARS[usize::from(b) % CHARS.len()];
    let mut options = Vec::new();
    if flags & 1 != 0 {
        options.push(CopyOption::Format(Ident::new("csv")));
    }
    if flags & 2 != 0 {
        options.push(CopyOption::Header(true));
    }
    if flags & 4 != 0 {
        options.push(CopyOption::Delimiter(pick(*delim)));
    }
    if flags & 8 != 0 {
        options.push(CopyOption::Quote(pick(*quote)));
    }
    if flags & 16 != 0 {
        options.push(CopyOption::Escape(pick(*escape)));
    }
    if flags & 32 != 0 {
        let n = NULLS[(usize::from(flags >> 6) + 4 * usize::from(*delim >> 7)) % NULLS.len()];
        options.push(CopyOption::Null(n.to_owned()));
    }
    let Ok(fmt) = CopyFormat::from_options(&options, &[]) else {
        return;
    };

    let whole = parse(&fmt, rest, 0);
    let chunked = parse(&fmt, rest, usize::from(*chunk % 64) + 1);
    assert_eq!(whole, chunked, "chunks of {} changed the records", chunk % 64 + 1);

    // Round trip: write the records as COPY TO would, parse them back.
    let (records, _) = whole;
    let plain = CopyFormat {
        header: false,
        ..fmt.clone()
    };
    let mut out = String::new();
    let mut expected = Vec::new();
    for (_, fields) in &records {
        // Text format cannot tell a value equal to the NULL string from
        // NULL (PostgreSQL's neither): such rows do not round-trip.
        // A NULL string with other backslashes than `\N` is compared with
        // the raw text, so it cannot be written as itself either.
        if fmt.format == Format::Text
            && (fields.iter().any(|f| f.as_deref() == Some(&*fmt.null))
                || (fmt.null != "\\N" && fmt.null.contains('\\') && fields.contains(&None)))
        {
            continue;
        }
        let row: Vec<Option<&str>> = fields.iter().map(|f| f.as_deref()).collect();
        fmt.encode_row(&row, &mut out);
        expected.push(fields.clone());
    }
    let (again, err) = parse(&plain, out.as_bytes(), 0);
    assert_eq!(err, None, "what the encoder wrote did not parse: {out:?}");
    let again: Vec<Vec<Field>> = again.into_iter().map(|(_, f)| f).collect();
    assert_eq!(again, expected, "round trip through {out:?}");
});
