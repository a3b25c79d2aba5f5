//! The `.npy` header: its Python dict literal (`descr`, `fortran_order`, `shape`) parsed by a
//! small recursive-descent parser that accepts what numpy writes and names what it refuses.

use crate::{DType, FormatError};

pub(super) fn header_err(msg: &str) -> FormatError {
    FormatError::Npy(format!("bad header: {msg}"))
}

pub(super) fn parse_descr(descr: &str) -> Result<(DType, bool), FormatError> {
    let mut chars = descr.chars();
    let order = chars.next().unwrap_or(' ');
    let (big_endian, rest) = match order {
        '<' | '|' | '=' => (false, chars.as_str()),
        '>' => (true, chars.as_str()),
        _ => (false, descr),
    };
    let mut rest_chars = rest.chars();
    let kind = rest_chars.next().unwrap_or(' ');
    let size = rest_chars.as_str().parse::<usize>().ok();
    match size.and_then(|s| DType::from_numpy(kind, s)) {
        Some(d) => Ok((d, big_endian)),
        None => Err(FormatError::Npy(format!(
            "unsupported dtype '{descr}' (voxlake reads bool, int8..int64, uint8..uint64, float16..float64)"
        ))),
    }
}

#[derive(Default)]
pub(super) struct HeaderDict {
    pub(super) descr: Option<String>,
    pub(super) fortran_order: Option<bool>,
    pub(super) shape: Option<Vec<usize>>,
}

/// Parses the Python dict literal numpy writes, e.g.
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (30, 30, 10, 10), }`.
pub(super) fn parse_header_dict(header: &str) -> Result<HeaderDict, FormatError> {
    let mut p = Parser {
        s: header.trim_end_matches(['\n', ' ', '\0']).as_bytes(),
        i: 0,
    };
    let mut dict = HeaderDict::default();
    p.expect(b'{')?;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') {
                    return Err(FormatError::Npy(
                        "unsupported dtype: structured arrays are not tensors".into(),
                    ));
                }
                dict.descr = Some(p.string()?);
            }
            "fortran_order" => dict.fortran_order = Some(p.boolean()?),
            "shape" => dict.shape = Some(p.tuple()?),
            other => return Err(header_err(&format!("unexpected key '{other}'"))),
        }
        p.skip_ws();
        if !p.eat(b',') {
            p.skip_ws();
            p.expect(b'}')?;
            break;
        }
    }
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(header_err(&format!(
            "{} unexpected bytes after the header dict (does the header length lie?)",
            p.s.len() - p.i
        )));
    }
    Ok(dict)
}

struct Parser<'s> {
    s: &'s [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), FormatError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(header_err(&format!(
                "expected '{}' at byte {}",
                c as char, self.i
            )))
        }
    }
    fn string(&mut self) -> Result<String, FormatError> {
        let quote = self.peek().filter(|q| *q == b'\'' || *q == b'"');
        let quote =
            quote.ok_or_else(|| header_err(&format!("expected a string at byte {}", self.i)))?;
        self.i += 1;
        let start = self.i;
        while self.peek().is_some_and(|c| c != quote) {
            self.i += 1;
        }
        let s = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.expect(quote)?;
        Ok(s)
    }
    fn boolean(&mut self) -> Result<bool, FormatError> {
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            Err(header_err("fortran_order is not True or False"))
        }
    }
    fn tuple(&mut self) -> Result<Vec<usize>, FormatError> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            // numpy 1.x wrote long ints as `30L`.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            self.eat(b'L');
            let dim = digits
                .parse::<usize>()
                .map_err(|_| header_err("shape is not a tuple of non-negative integers"))?;
            dims.push(dim);
            self.skip_ws();
            if !self.eat(b',') {
                self.skip_ws();
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}
