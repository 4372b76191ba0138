//! COPY's text and CSV formats: options from the statement, a streaming
//! record parser for `COPY ... FROM STDIN` (CopyData chunks are arbitrary
//! byte ranges, not rows), and the row encoder for `COPY ... TO STDOUT`.
//!
//! The formats follow PostgreSQL's: text has tab-separated fields,
//! backslash escapes and `\N` for NULL; CSV has quoted fields (which may
//! span lines), `""` for a quote inside quotes and an unquoted empty field
//! for NULL. Deliberately limited: no binary format, no FORCE_* options.

use sqlparser::ast::{self, CopyLegacyCsvOption, CopyLegacyOption, CopyOption};

use crate::sqlstate::{NUL_IN_TEXT, PgError};

/// Text or CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PostgreSQL's text format.
    Text,
    /// CSV.
    Csv,
}

/// A COPY statement's format options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFormat {
    /// Text or CSV.
    pub format: Format,
    /// Field separator.
    pub delimiter: char,
    /// How NULL is written.
    pub null: String,
    /// First line is a header (skipped on input, written on output).
    pub header: bool,
    /// CSV quote character.
    pub quote: char,
    /// CSV escape character (inside quotes).
    pub escape: char,
}

impl CopyFormat {
    /// The options of a COPY statement (PostgreSQL's `WITH (...)` and the
    /// older `CSV HEADER` spelling psql's `\copy` sends).
    pub fn from_options(
        options: &[CopyOption],
        legacy: &[CopyLegacyOption],
    ) -> Result<CopyFormat, PgError> {
        // PostgreSQL's options are SQL literals, which never hold U+0000:
        // its lexer refuses one before any option is looked at.
        let nul = |c: &char| *c == '\0';
        let holds_nul = options.iter().any(|o| match o {
            CopyOption::Delimiter(c) | CopyOption::Quote(c) | CopyOption::Escape(c) => nul(c),
            CopyOption::Null(n) => n.contains('\0'),
            _ => false,
        }) || legacy.iter().any(|o| match o {
            CopyLegacyOption::Delimiter(c) => nul(c),
            CopyLegacyOption::Null(n) => n.contains('\0'),
            CopyLegacyOption::Csv(csv) => csv.iter().any(|c| match c {
                CopyLegacyCsvOption::Quote(c) | CopyLegacyCsvOption::Escape(c) => nul(c),
                _ => false,
            }),
            _ => false,
        });
        if holds_nul {
            return Err(PgError::character_not_in_repertoire(NUL_IN_TEXT));
        }
        let mut format = Format::Text;
        let mut delimiter = None;
        let mut null = None;
        let mut header = false;
        let mut quote = None;
        let mut escape = None;
        let unsupported = |what: String| {
            PgError::feature_not_supported(format!("COPY option {what} is not supported"))
                .hint("COPY supports FORMAT text|csv, DELIMITER, NULL, HEADER, QUOTE and ESCAPE")
        };
        for o in options {
            match o {
                CopyOption::Format(f) => {
                    format = match f.value.to_ascii_lowercase().as_str() {
                        "text" => Format::Text,
                        "csv" => Format::Csv,
                        other => return Err(unsupported(format!("FORMAT {other}"))),
                    }
                }
                CopyOption::Delimiter(c) => delimiter = Some(*c),
                CopyOption::Null(n) => null = Some(n.clone()),
                CopyOption::Header(h) => header = *h,
                CopyOption::Quote(c) => quote = Some(*c),
                CopyOption::Escape(c) => escape = Some(*c),
                CopyOption::Encoding(e)
                    if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
                other => return Err(unsupported(other.to_string())),
            }
        }
        for o in legacy {
            match o {
                CopyLegacyOption::Csv(csv) => {
                    format = Format::Csv;
                    for c in csv {
                        match c {
                            CopyLegacyCsvOption::Header => header = true,
                            CopyLegacyCsvOption::Quote(q) => quote = Some(*q),
                            CopyLegacyCsvOption::Escape(e) => escape = Some(*e),
                            other => return Err(unsupported(other.to_string())),
                        }
                    }
                }
                CopyLegacyOption::Header => header = true,
                CopyLegacyOption::Delimiter(c) => delimiter = Some(*c),
                CopyLegacyOption::Null(n) => null = Some(n.clone()),
                other => return Err(unsupported(other.to_string())),
            }
        }
        if header && format == Format::Text {
            return Err(
                PgError::feature_not_supported("cannot specify HEADER in text mode")
                    .hint("use FORMAT csv"),
            );
        }
        if format == Format::Text && (quote.is_some() || escape.is_some()) {
            let what = if quote.is_some() { "quote" } else { "escape" };
            return Err(PgError::feature_not_supported(format!(
                "COPY {what} available only in CSV mode"
            )));
        }
        let quote = quote.unwrap_or('"');
        let fmt = CopyFormat {
            format,
            delimiter: delimiter.unwrap_or(if format == Format::Csv { ',' } else { '\t' }),
            null: null.unwrap_or_else(|| {
                if format == Format::Csv {
                    String::new()
                } else {
                    "\\N".to_owned()
                }
            }),
            header,
            quote,
            escape: escape.unwrap_or(quote),
        };
        fmt.check()?;
        Ok(fmt)
    }

    /// PostgreSQL's rules for the characters (`ProcessCopyOptions`, with
    /// its SQLSTATEs): the parser finds records by newlines and fields by
    /// one-byte characters, so anything else could not be read back. One
    /// rule is ours: PostgreSQL accepts a newline as the CSV quote or
    /// escape, which no record could then hold.
    fn check(&self) -> Result<(), PgError> {
        let unsupported = |m: &str| PgError::feature_not_supported(m.to_owned());
        let invalid = |m: &str| PgError::invalid_parameter_value(m.to_owned());
        let line_break = |c: char| c == '\n' || c == '\r';
        if !self.delimiter.is_ascii() {
            return Err(unsupported(
                "COPY delimiter must be a single one-byte character",
            ));
        }
        if line_break(self.delimiter) {
            return Err(invalid(
                "COPY delimiter cannot be newline or carriage return",
            ));
        }
        if self.null.contains(line_break) {
            return Err(invalid(
                "COPY null representation cannot use newline or carriage return",
            ));
        }
        if self.format == Format::Text
            && (self.delimiter == '\\'
                || self.delimiter == '.'
                || self.delimiter.is_ascii_lowercase()
                || self.delimiter.is_ascii_digit())
        {
            return Err(invalid(&format!(
                "COPY delimiter cannot be \"{}\"",
                self.delimiter
            )));
        }
        if self.format == Format::Csv {
            if !self.quote.is_ascii() {
                return Err(unsupported(
                    "COPY quote must be a single one-byte character",
                ));
            }
            if !self.escape.is_ascii() {
                return Err(unsupported(
                    "COPY escape must be a single one-byte character",
                ));
            }
            if line_break(self.quote) || line_break(self.escape) {
                return Err(invalid(
                    "COPY quote and escape cannot be newline or carriage return",
                ));
            }
            if self.delimiter == self.quote {
                return Err(invalid("COPY delimiter and quote must be different"));
            }
        }
        if self.null.contains(self.delimiter) {
            return Err(unsupported(
                "COPY delimiter must not appear in the NULL specification",
            ));
        }
        if self.format == Format::Csv && self.null.contains(self.quote) {
            return Err(unsupported(
                "CSV quote character must not appear in the NULL specification",
            ));
        }
        Ok(())
    }

    /// Writes one row (`None` is NULL), ending with a newline.
    pub fn encode_row(&self, fields: &[Option<&str>], out: &mut String) {
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(self.delimiter);
            }
            match (f, self.format) {
                (None, _) => out.push_str(&self.null),
                (Some(v), Format::Text) => {
                    for ch in v.chars() {
                        match ch {
                            '\\' => out.push_str("\\\\"),
                            '\n' => out.push_str("\\n"),
                            '\r' => out.push_str("\\r"),
                            '\t' => out.push_str("\\t"),
                            c if c == self.delimiter => {
                                out.push('\\');
                                out.push(c);
                            }
                            c => out.push(c),
                        }
                    }
                }
                (Some(v), Format::Csv) => {
                    // A lone `\.` would read back as the end of the data.
                    let needs = v.is_empty()
                        || *v == self.null
                        || (fields.len() == 1 && *v == "\\.")
                        || v.contains(|c: char| {
                            c == self.delimiter || c == self.quote || c == '\n' || c == '\r'
                        });
                    if needs {
                        out.push(self.quote);
                        for ch in v.chars() {
                            if ch == self.quote || ch == self.escape {
                                out.push(self.escape);
                            }
                            out.push(ch);
                        }
                        out.push(self.quote);
                    } else {
                        out.push_str(v);
                    }
                }
            }
        }
        out.push('\n');
    }
}

/// A field of a parsed record: `None` is NULL.
pub type Field = Option<String>;

/// Longest record accepted (a row's text; an entity holds at most 1 MiB,
/// escaped text can be a few times longer).
pub const MAX_RECORD_BYTES: usize = 8 << 20;

/// Parses COPY input as it arrives, record by record, in time linear in
/// the input: records are taken from an offset into the buffer (which is
/// compacted only once most of it is consumed), and the search for a
/// record's end resumes where the last chunk left it.
#[derive(Debug)]
pub struct Parser {
    fmt: CopyFormat,
    buf: Vec<u8>,
    /// Where the next record starts in `buf`.
    start: usize,
    /// How far the search for the next record's end has looked, whether
    /// it is inside CSV quotes there, and the newlines it has passed.
    scanned: usize,
    in_quotes: bool,
    lines: u64,
    /// Lines consumed so far (for error messages).
    pub line: u64,
    header_pending: bool,
    /// `\.` was seen: the rest is ignored.
    pub ended: bool,
}

impl Parser {
    /// A parser for `fmt`.
    pub fn new(fmt: CopyFormat) -> Parser {
        Parser {
            header_pending: fmt.header,
            fmt,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            in_quotes: false,
            lines: 0,
            line: 0,
            ended: false,
        }
    }

    /// Adds a chunk of input.
    pub fn feed(&mut self, data: &[u8]) {
        if !self.ended {
            self.buf.extend_from_slice(data);
        }
    }

    /// The next complete record, with the line it starts on. At the end of
    /// input (`last`), a final record without a newline counts too.
    pub fn next_record(&mut self, last: bool) -> Result<Option<(u64, Vec<Field>)>, PgError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let Some((end, consumed, lines)) = self.record_end(last)? else {
                return Ok(None);
            };
            let raw = self.buf[self.start..end].to_vec();
            self.start = consumed;
            // Compact once most of the buffer is consumed: each byte moves
            // at most once on average.
            if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
                self.buf.drain(..self.start);
                self.scanned -= self.start;
                self.start = 0;
            }
            let line = self.line + 1;
            self.line += lines;
            let text = String::from_utf8(raw).map_err(|_| {
                PgError::character_not_in_repertoire(format!(
                    "invalid byte sequence for encoding \"UTF8\" on line {line}"
                ))
            })?;
            let text = text.strip_suffix('\r').unwrap_or(&text);
            if text == "\\." {
                self.ended = true;
                return Ok(None);
            }
            if self.header_pending {
                self.header_pending = false;
                continue;
            }
            let fields = match self.fmt.format {
                Format::Text => self.text_fields(text, line)?,
                Format::Csv => self.csv_fields(text, line)?,
            };
            // Checked in the fields, not the line: a NUL byte may be a
            // client's delimiter or quote, and an escape (`\0`) makes one.
            if fields.iter().flatten().any(|f| f.contains('\0')) {
                return Err(nul_on_line(line));
            }
            return Ok(Some((line, fields)));
        }
    }

    /// Where the next record ends: (end of its bytes, where the record
    /// after it starts, lines it spans). CSV quotes may hold newlines. An
    /// unfinished record longer than [`MAX_RECORD_BYTES`] is an error.
    fn record_end(&mut self, last: bool) -> Result<Option<(usize, usize, u64)>, PgError> {
        let quote = self.fmt.quote as u32;
        let escape = self.fmt.escape as u32;
        let csv = self.fmt.format == Format::Csv && quote < 128;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            // Inside quotes, an escape before a quote or an escape makes it
            // a literal character (with escape = quote, `""` toggles twice).
            if csv && self.in_quotes && escape != quote && u32::from(b) == escape {
                match self.buf.get(i + 1) {
                    Some(&n) if u32::from(n) == quote || u32::from(n) == escape => {
                        i += 2;
                        continue;
                    }
                    // The character it escapes is in the next chunk.
                    None if !last => break,
                    _ => {}
                }
            }
            if csv && u32::from(b) == quote {
                self.in_quotes = !self.in_quotes;
            } else if b == b'\n' {
                self.lines += 1;
                if !self.in_quotes {
                    if i - self.start > MAX_RECORD_BYTES {
                        return Err(self.too_long());
                    }
                    let lines = std::mem::take(&mut self.lines);
                    self.scanned = i + 1;
                    return Ok(Some((i, i + 1, lines)));
                }
            }
            i += 1;
        }
        self.scanned = i;
        if self.buf.len() - self.start > MAX_RECORD_BYTES {
            return Err(self.too_long());
        }
        if last && self.start < self.buf.len() {
            let lines = std::mem::take(&mut self.lines) + 1;
            let end = self.buf.len();
            return Ok(Some((end, end, lines)));
        }
        Ok(None)
    }

    fn too_long(&self) -> PgError {
        PgError::program_limit_exceeded(format!(
                "COPY record on line {} is longer than {MAX_RECORD_BYTES} bytes",
                self.line + 1
            ),
        )
        .hint("a row must fit in an entity (1 MiB of properties); check the format's delimiter and quoting")
    }

    fn text_fields(&self, line_text: &str, line: u64) -> Result<Vec<Field>, PgError> {
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut raw = String::new();
        let mut chars = line_text.chars().peekable();
        let bad = |what: &str| {
            PgError::bad_copy_file_format(format!("invalid COPY data on line {line}: {what}"))
        };
        let finish = |cur: &mut String, raw: &mut String, fields: &mut Vec<Field>| {
            fields.push(if *raw == self.fmt.null {
                None
            } else {
                Some(std::mem::take(cur))
            });
            cur.clear();
            raw.clear();
        };
        while let Some(c) = chars.next() {
            if c == self.fmt.delimiter {
                finish(&mut cur, &mut raw, &mut fields);
                continue;
            }
            raw.push(c);
            if c != '\\' {
                cur.push(c);
                continue;
            }
            let Some(e) = chars.next() else {
                return Err(bad("a backslash ends the line"));
            };
            raw.push(e);
            match e {
                'n' => cur.push('\n'),
                'r' => cur.push('\r'),
                't' => cur.push('\t'),
                'b' => cur.push('\u{8}'),
                'f' => cur.push('\u{c}'),
                'v' => cur.push('\u{b}'),
                'x' => {
                    let mut v = 0u32;
                    let mut n = 0;
                    while n < 2 && chars.peek().is_some_and(char::is_ascii_hexdigit) {
                        let d = chars.next().expect("peeked");
                        raw.push(d);
                        v = v * 16 + d.to_digit(16).expect("hex");
                        n += 1;
                    }
                    if n == 0 {
                        cur.push('x');
                    } else {
                        cur.push(char::from_u32(v).ok_or_else(|| bad("invalid escape"))?);
                    }
                }
                '0'..='7' => {
                    let mut v = e.to_digit(8).expect("octal");
                    let mut n = 1;
                    while n < 3 && chars.peek().is_some_and(|d| ('0'..='7').contains(d)) {
                        let d = chars.next().expect("peeked");
                        raw.push(d);
                        v = v * 8 + d.to_digit(8).expect("octal");
                        n += 1;
                    }
                    cur.push(char::from_u32(v).ok_or_else(|| bad("invalid escape"))?);
                }
                other => cur.push(other),
            }
        }
        finish(&mut cur, &mut raw, &mut fields);
        Ok(fields)
    }

    fn csv_fields(&self, text: &str, line: u64) -> Result<Vec<Field>, PgError> {
        let (d, q, esc) = (self.fmt.delimiter, self.fmt.quote, self.fmt.escape);
        let mut fields = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            let mut cur = String::new();
            let mut quoted = false;
            let mut in_quotes = false;
            let mut by_delimiter = false;
            loop {
                match chars.next() {
                    None => {
                        if in_quotes {
                            return Err(PgError::bad_copy_file_format(format!(
                                "unterminated CSV quoted field on line {line}"
                            )));
                        }
                        break;
                    }
                    Some(c)
                        if in_quotes
                            && c == esc
                            && matches!(chars.peek(), Some(&n) if n == q || n == esc) =>
                    {
                        cur.push(chars.next().expect("peeked"));
                    }
                    Some(c) if c == q => {
                        in_quotes = !in_quotes;
                        quoted = true;
                    }
                    Some(c) if c == d && !in_quotes => {
                        by_delimiter = true;
                        break;
                    }
                    Some(c) => cur.push(c),
                }
            }
            // An unquoted field equal to the NULL string is NULL.
            fields.push(if !quoted && cur == self.fmt.null {
                None
            } else {
                Some(cur)
            });
            if !by_delimiter {
                return Ok(fields);
            }
        }
    }
}

/// A record holding U+0000, refused as PostgreSQL refuses it: its text
/// never holds that character.
fn nul_on_line(line: u64) -> PgError {
    PgError::character_not_in_repertoire(format!("{NUL_IN_TEXT} on line {line}"))
}

/// Is this `COPY ... FROM STDIN` / `TO STDOUT`? (`COPY ... FROM 'file'`
/// reads the server's files: refused.)
pub fn check_target(target: &ast::CopyTarget, to: bool) -> Result<(), PgError> {
    match (target, to) {
        (ast::CopyTarget::Stdin, false) | (ast::CopyTarget::Stdout, true) => Ok(()),
        _ => Err(PgError::insufficient_privilege(
            "COPY to or from a file or program on the server is not allowed",
        )
        .hint("use COPY ... FROM STDIN / TO STDOUT, or psql's \\copy")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> CopyFormat {
        CopyFormat::from_options(&[], &[]).unwrap()
    }

    fn csv(header: bool) -> CopyFormat {
        let mut opts = vec![CopyOption::Format(ast::Ident::new("csv"))];
        if header {
            opts.push(CopyOption::Header(true));
        }
        CopyFormat::from_options(&opts, &[]).unwrap()
    }

    fn all(p: &mut Parser) -> Vec<(u64, Vec<Field>)> {
        let mut v = Vec::new();
        while let Some(r) = p.next_record(true).unwrap() {
            v.push(r);
        }
        v
    }

    fn s(x: &str) -> Field {
        Some(x.to_owned())
    }

    #[test]
    fn text_records_arrive_in_arbitrary_chunks() {
        let input = "a\tb\\tc\t\\N\nx\\\\y\t\\101\t\n\\.\nignored\n";
        // Byte by byte: the parser holds partial records.
        let mut p = Parser::new(text());
        let mut got = Vec::new();
        for b in input.as_bytes() {
            p.feed(std::slice::from_ref(b));
            while let Some(r) = p.next_record(false).unwrap() {
                got.push(r);
            }
        }
        got.extend(all(&mut p));
        assert_eq!(
            got,
            vec![
                (1, vec![s("a"), s("b\tc"), None]),
                (2, vec![s("x\\y"), s("A"), s("")]),
            ]
        );
    }

    /// U+0000 is refused (22021) whether it arrives as a byte or from a
    /// text-format escape, after the records before it.
    #[test]
    fn nul_is_refused_as_a_byte_and_from_an_escape() {
        for (input, fmt) in [
            (&b"ok\n\\0\n"[..], text()),
            (&b"ok\nn\0l\n"[..], text()),
            (&b"ok\n\"n\0l\"\n"[..], csv(false)),
        ] {
            let mut p = Parser::new(fmt);
            p.feed(input);
            assert_eq!(p.next_record(true).unwrap(), Some((1, vec![s("ok")])));
            let e = p.next_record(true).expect_err("a NUL");
            assert_eq!(e.code, "22021", "{input:?}");
            assert!(e.message.contains("0x00 on line 2"), "{}", e.message);
        }
    }

    #[test]
    fn csv_quotes_span_lines_and_header_is_skipped() {
        let mut p = Parser::new(csv(true));
        p.feed(b"pk,rk,note\r\np1,\"a,b\",\"two\nlines \"\"q\"\"\"\np2,r,\n,\"\",x");
        assert_eq!(
            all(&mut p),
            vec![
                (2, vec![s("p1"), s("a,b"), s("two\nlines \"q\"")]),
                (4, vec![s("p2"), s("r"), None]),
                (5, vec![None, s(""), s("x")]),
            ]
        );
        let mut p = Parser::new(csv(false));
        p.feed(b"\"open\n");
        assert_eq!(p.next_record(true).unwrap_err().code, "22P04");
    }

    #[test]
    fn encoding_round_trips_through_the_parser() {
        for fmt in [text(), csv(false)] {
            let rows: Vec<Vec<Option<&str>>> = vec![
                vec![Some("plain"), None, Some("")],
                vec![
                    Some("tab\there"),
                    Some("new\nline"),
                    Some("q\"uote,comma\\slash"),
                ],
            ];
            let mut out = String::new();
            for r in &rows {
                fmt.encode_row(r, &mut out);
            }
            let mut p = Parser::new(fmt.clone());
            p.feed(out.as_bytes());
            let got: Vec<Vec<Field>> = all(&mut p).into_iter().map(|(_, f)| f).collect();
            let want: Vec<Vec<Field>> = rows
                .iter()
                .map(|r| r.iter().map(|f| f.map(str::to_owned)).collect())
                .collect();
            assert_eq!(got, want, "{:?}: {out:?}", fmt.format);
        }
    }

    #[test]
    fn options_follow_postgres() {
        let legacy = CopyFormat::from_options(
            &[],
            &[CopyLegacyOption::Csv(vec![CopyLegacyCsvOption::Header])],
        )
        .unwrap();
        assert_eq!(legacy, csv(true));
        let e = CopyFormat::from_options(&[CopyOption::Header(true)], &[]).unwrap_err();
        assert_eq!(e.code, "0A000");
        let e = CopyFormat::from_options(&[CopyOption::Format(ast::Ident::new("binary"))], &[])
            .unwrap_err();
        assert!(e.message.contains("binary"));
    }

    #[test]
    fn options_postgres_refuses_are_refused_with_its_sqlstates() {
        let refused = |opts: &[CopyOption]| CopyFormat::from_options(opts, &[]).unwrap_err();
        let csv = || CopyOption::Format(ast::Ident::new("csv"));
        for (opts, code, message) in [
            (vec![CopyOption::Delimiter('\n')], "22023", "newline"),
            (vec![CopyOption::Delimiter('é')], "0A000", "one-byte"),
            (vec![CopyOption::Delimiter('a')], "22023", "cannot be \"a\""),
            (vec![CopyOption::Delimiter('\0')], "22021", "0x00"),
            (vec![csv(), CopyOption::Quote('\0')], "22021", "0x00"),
            (vec![csv(), CopyOption::Escape('\0')], "22021", "0x00"),
            (vec![CopyOption::Null("a\0".into())], "22021", "0x00"),
            // Before the text-mode refusal of QUOTE, as PostgreSQL's lexer.
            (vec![CopyOption::Quote('\0')], "22021", "0x00"),
            (
                vec![CopyOption::Quote('"')],
                "0A000",
                "quote available only in CSV mode",
            ),
            (
                vec![CopyOption::Escape('"')],
                "0A000",
                "escape available only in CSV mode",
            ),
            (vec![csv(), CopyOption::Quote('é')], "0A000", "one-byte"),
            (
                vec![csv(), CopyOption::Quote(',')],
                "22023",
                "must be different",
            ),
            (vec![csv(), CopyOption::Quote('\n')], "22023", "newline"),
            (
                vec![csv(), CopyOption::Null("a,b".into())],
                "0A000",
                "delimiter must not appear",
            ),
            (
                vec![csv(), CopyOption::Null("x\"".into())],
                "0A000",
                "quote character must not",
            ),
            (
                vec![CopyOption::Null("x\ny".into())],
                "22023",
                "null representation",
            ),
        ] {
            let e = refused(&opts);
            assert_eq!(e.code, code, "{opts:?}: {}", e.message);
            assert!(e.message.contains(message), "{opts:?}: {}", e.message);
        }
    }

    #[test]
    fn csv_escapes_inside_quotes_and_a_lone_end_marker_round_trip() {
        let fmt = CopyFormat::from_options(
            &[
                CopyOption::Format(ast::Ident::new("csv")),
                CopyOption::Escape('\\'),
            ],
            &[],
        )
        .unwrap();
        // An escaped quote does not end the quotes (the newline after it
        // is inside the field), and an escaped escape is one backslash.
        let mut p = Parser::new(fmt.clone());
        p.feed(b"\"a\\\"b\nc\",\"d\\\\\"\n");
        assert_eq!(all(&mut p), vec![(1, vec![s("a\"b\nc"), s("d\\")])]);
        // A row holding only `\.` is written quoted, or it would read back
        // as the end of the data.
        let mut out = String::new();
        fmt.encode_row(&[Some("\\.")], &mut out);
        fmt.encode_row(&[Some("after")], &mut out);
        let mut p = Parser::new(fmt);
        p.feed(out.as_bytes());
        assert_eq!(
            all(&mut p),
            vec![(1, vec![s("\\.")]), (2, vec![s("after")])]
        );
    }

    #[test]
    fn one_large_chunk_of_many_records_parses_whole_and_overlong_records_fail() {
        // 200,000 records in one CopyData chunk, then the rest of a CSV
        // record whose quotes span chunks.
        let mut p = Parser::new(csv(false));
        let mut data = String::new();
        for i in 0..200_000 {
            data.push_str(&format!("{i},\"v{i}\"\n"));
        }
        data.push_str("last,\"a\nb");
        p.feed(data.as_bytes());
        let mut n = 0;
        while let Some((line, fields)) = p.next_record(false).unwrap() {
            assert_eq!(line, n + 1);
            assert_eq!(fields[1], s(&format!("v{n}")));
            n += 1;
        }
        assert_eq!(n, 200_000);
        p.feed(b"c\"\n");
        let (line, fields) = p.next_record(false).unwrap().unwrap();
        assert_eq!((line, fields), (200_001, vec![s("last"), s("a\nbc")]));
        assert_eq!(p.next_record(true).unwrap(), None);
        // A record that never ends is refused once it passes the limit.
        let mut p = Parser::new(text());
        let chunk = vec![b'x'; 1 << 20];
        let mut err = None;
        for _ in 0..=MAX_RECORD_BYTES >> 20 {
            p.feed(&chunk);
            if let Err(e) = p.next_record(false) {
                err = Some(e);
                break;
            }
        }
        assert_eq!(err.expect("refused").code, "54000");
        // A complete record over the limit, in one chunk, too.
        let mut p = Parser::new(text());
        let mut long = vec![b'x'; MAX_RECORD_BYTES + 1];
        long.push(b'\n');
        p.feed(&long);
        assert_eq!(p.next_record(false).unwrap_err().code, "54000");
    }
}
