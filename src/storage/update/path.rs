//! The JSON path lexer of field paths in update operations: Tarantool's `json.c`
//! (`json_lexer_next_token`), index base 1.
//!
//! Error positions are 1-based symbol (UTF-8 character) positions, as Tarantool reports
//! them in "invalid JSON in position N". Identifiers take Unicode letters, digits and `_`
//! (`char::is_alphabetic` / `is_numeric` stand in for ICU's `u_isUAlphabetic` /
//! `u_isdigit`); a byte that is not UTF-8 ends the path with an error.

/// One step of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token<'p> {
    End,
    /// `[n]`, already 0-based. Tarantool parses the digits into a C `int` and lets it wrap.
    Num(i32),
    /// An identifier or a quoted `["key"]` / `['key']` (no escapes).
    Str(&'p [u8]),
    /// `[*]`.
    Any,
}

/// A lexer over one path; `offset` and `symbols` say how far it has read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lexer<'p> {
    src: &'p [u8],
    pub(super) offset: usize,
    pub(super) symbols: u32,
}

impl<'p> Lexer<'p> {
    pub(super) fn new(src: &'p [u8]) -> Self {
        Lexer {
            src,
            offset: 0,
            symbols: 0,
        }
    }

    /// A lexer over `src` positioned after its first `offset` bytes (which were lexed).
    pub(super) fn resumed(src: &'p [u8], offset: usize) -> Self {
        let symbols = src[..offset.min(src.len())]
            .iter()
            .filter(|&&byte| byte & 0xc0 != 0x80)
            .count() as u32;
        Lexer {
            src,
            offset: offset.min(src.len()),
            symbols,
        }
    }

    /// The part not read yet.
    pub(super) fn rest(&self) -> &'p [u8] {
        &self.src[self.offset..]
    }

    pub(super) fn is_eof(&self) -> bool {
        self.offset >= self.src.len()
    }

    /// `json_read_symbol`: one UTF-8 character, or the error position.
    fn read_symbol(&mut self) -> Result<char, u32> {
        let rest = self.rest();
        let Some(&lead) = rest.first() else {
            return Err(self.symbols + 1);
        };
        let len = match lead {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 0,
        };
        let decoded = rest
            .get(..len)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| text.chars().next());
        match decoded {
            Some(c) => {
                self.offset += len;
                self.symbols += 1;
                Ok(c)
            }
            None => {
                // ICU's U8_NEXT steps over the bad byte.
                self.offset += 1;
                Err(self.symbols + 1)
            }
        }
    }

    fn current_byte(&self) -> Option<u8> {
        self.src.get(self.offset).copied()
    }

    fn skip_byte(&mut self) {
        self.offset += 1;
        self.symbols += 1;
    }

    /// `json_lexer_next_token`.
    pub(super) fn next_token(&mut self) -> Result<Token<'p>, u32> {
        if self.is_eof() {
            return Ok(Token::End);
        }
        let last_offset = self.offset;
        let last_symbols = self.symbols;
        match self.read_symbol()? {
            '[' => {
                let Some(next) = self.current_byte() else {
                    return Err(self.symbols);
                };
                let token = match next {
                    b'"' | b'\'' => self.string(next)?,
                    b'*' => {
                        self.skip_byte();
                        Token::Any
                    }
                    _ => self.integer()?,
                };
                if self.current_byte() != Some(b']') {
                    return Err(self.symbols + 1);
                }
                self.skip_byte();
                Ok(token)
            }
            '.' => {
                if self.is_eof() {
                    return Err(self.symbols + 1);
                }
                self.identifier()
            }
            _ => {
                if last_offset != 0 {
                    return Err(self.symbols);
                }
                self.offset = last_offset;
                self.symbols = last_symbols;
                self.identifier()
            }
        }
    }

    fn string(&mut self, quote: u8) -> Result<Token<'p>, u32> {
        self.skip_byte();
        let start = self.offset;
        loop {
            let c = self.read_symbol()?;
            if c == char::from(quote) {
                let end = self.offset - 1;
                if end == start {
                    return Err(self.symbols);
                }
                return Ok(Token::Str(&self.src[start..end]));
            }
        }
    }

    fn integer(&mut self) -> Result<Token<'p>, u32> {
        let digits = self
            .rest()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return Err(self.symbols + 1);
        }
        let mut value: i32 = 0;
        for &digit in &self.rest()[..digits] {
            value = value.wrapping_mul(10).wrapping_add(i32::from(digit - b'0'));
        }
        if value < 1 {
            return Err(self.symbols + 1);
        }
        self.offset += digits;
        self.symbols += digits as u32;
        Ok(Token::Num(value - 1))
    }

    fn identifier(&mut self) -> Result<Token<'p>, u32> {
        let start = self.offset;
        let first = self.read_symbol()?;
        if !(first.is_alphabetic() || first == '_') {
            return Err(self.symbols);
        }
        loop {
            let (offset, symbols) = (self.offset, self.symbols);
            match self.read_symbol() {
                Ok(c) if c.is_alphabetic() || c == '_' || c.is_numeric() => {}
                Ok(_) => {
                    self.offset = offset;
                    self.symbols = symbols;
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(Token::Str(&self.src[start..self.offset]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(path: &[u8]) -> Result<(Token<'_>, usize), u32> {
        let mut lexer = Lexer::new(path);
        lexer.next_token().map(|token| (token, lexer.offset))
    }

    fn all(path: &[u8]) -> Result<Vec<Token<'_>>, u32> {
        let mut lexer = Lexer::new(path);
        let mut tokens = Vec::new();
        loop {
            match lexer.next_token()? {
                Token::End => return Ok(tokens),
                token => tokens.push(token),
            }
        }
    }

    #[test]
    fn first_token_forms() {
        assert_eq!(first(b"[3]"), Ok((Token::Num(2), 3)));
        assert_eq!(first(b"[3].a"), Ok((Token::Num(2), 3)));
        assert_eq!(first(b"name.sub"), Ok((Token::Str(b"name"), 4)));
        assert_eq!(first(b"[\"a b\"]"), Ok((Token::Str(b"a b"), 7)));
        assert_eq!(first(b".v"), Ok((Token::Str(b"v"), 2)));
        assert_eq!(first(b""), Ok((Token::End, 0)));
        assert_eq!(first(b"[*]"), Ok((Token::Any, 3)));
    }

    #[test]
    fn error_positions_match_tarantool() {
        // [2.6] '[0]', '[2', '[2]..a' (5), 'm.a b' (4), and the rest by json.c's rules.
        assert_eq!(first(b"[0]"), Err(2));
        assert_eq!(first(b"[2"), Err(3));
        assert_eq!(first(b"["), Err(1));
        assert_eq!(first(b"1abc"), Err(1));
        assert_eq!(all(b"[2]..a"), Err(5));
        assert_eq!(all(b"m.a b"), Err(4));
        assert_eq!(all(b"m[\"\"]"), Err(4));
        assert_eq!(all(b"m."), Err(3));
        // Positions count characters, not bytes.
        assert_eq!(all("ä.b c".as_bytes()), Err(4));
    }

    #[test]
    fn paths_lex_into_steps() {
        assert_eq!(
            all(b"m.a[2]['x y'].b_1"),
            Ok(vec![
                Token::Str(b"m"),
                Token::Str(b"a"),
                Token::Num(1),
                Token::Str(b"x y"),
                Token::Str(b"b_1"),
            ])
        );
        assert_eq!(all("поле.ä".as_bytes()).map(|t| t.len()), Ok(2));
        // 99999999999 wraps in a C int to 1215752191.
        assert_eq!(all(b"[99999999999]"), Ok(vec![Token::Num(1215752190)]));
    }

    #[test]
    fn resumed_counts_symbols_of_the_part_read() {
        let lexer = Lexer::resumed("ä.b".as_bytes(), 2);
        assert_eq!(lexer.symbols, 1);
    }
}
