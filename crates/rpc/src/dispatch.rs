//! What a server's dispatcher is: [`Dispatch`], which `FooServer<S>`
//! implements, the [`Reply`] it writes in place and why it may refuse a
//! request ([`Refused`]); and the reader of a request's arguments the
//! generated dispatchers use.

use zerocopy::{Immutable, IntoBytes, TryFromBytes};

use crate::Interface;

/// A server's half of an interface, generated as `FooServer<S>`: decodes
/// a request's arguments in place, calls the method and encodes the
/// result in place.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::{Dispatch, Reply};
/// #[shmpipe::service]
/// pub trait Calc { fn add(&self, a: u32, b: u32) -> u32; }
/// struct C;
/// impl Calc for C { fn add(&self, a: u32, b: u32) -> u32 { a + b } }
///
/// let mut server = CalcServer(C);
/// let mut body = [0u8; 8];
/// body[..4].copy_from_slice(&2u32.to_ne_bytes());
/// body[4..].copy_from_slice(&3u32.to_ne_bytes());
/// let mut buf = [0u8; 16];
/// let mut reply = Reply::new(&mut buf);
/// server.dispatch(0, &body, &mut reply).unwrap(); // opcode 0: `add`
/// assert_eq!(reply.len(), 4);
/// assert_eq!(&buf[..4], &5u32.to_ne_bytes());
/// assert_eq!(CalcServer::<C>::reply_bound(0, &body), Some(4));
/// ```
pub trait Dispatch {
    /// The interface served.
    const INTERFACE: Interface;
    /// Runs the method `op` on the request `body`, writing the reply.
    fn dispatch(&mut self, op: u16, body: &[u8], reply: &mut Reply<'_>) -> Result<(), Refused>;
    /// The most bytes the reply to this request can take, when that is
    /// known before the call (results of fixed size): the server then
    /// writes the reply straight into the reply ring.
    fn reply_bound(op: u16, body: &[u8]) -> Option<usize> {
        let _ = (op, body);
        None
    }
}

/// Why the server refused a request (the reply's message).
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::{Dispatch, Refused, Reply};
/// #[shmpipe::service]
/// pub trait Calc { fn add(&self, a: u32, b: u32) -> u32; }
/// struct C;
/// impl Calc for C { fn add(&self, a: u32, b: u32) -> u32 { a + b } }
///
/// let mut buf = [0u8; 16];
/// let e = CalcServer(C).dispatch(0, &[1, 0], &mut Reply::new(&mut buf)).unwrap_err();
/// assert_eq!(e, Refused::Short); // `add` takes 8 bytes of arguments
/// assert_eq!(Refused::UnknownOp.message(), "unknown opcode");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No method has this opcode.
    UnknownOp,
    /// The body ends before the arguments do.
    Short,
    /// Bytes left over after the arguments.
    Trailing,
    /// A length points past the frame or over the interface's limit.
    TooLong,
    /// A value with a bit pattern its type does not allow (a `bool` of 2,
    /// a string that is not UTF-8).
    BadValue,
    /// The reply would exceed the interface's limit.
    ReplyTooLarge,
}

impl Refused {
    /// The message sent to the client.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::Refused;
    /// assert_eq!(Refused::Short.message(), "arguments cut short");
    /// assert_eq!(Refused::BadValue.message(), "a value out of its type's range");
    /// ```
    pub fn message(self) -> &'static str {
        match self {
            Refused::UnknownOp => "unknown opcode",
            Refused::Short => "arguments cut short",
            Refused::Trailing => "bytes after the arguments",
            Refused::TooLong => "a length past the frame",
            Refused::BadValue => "a value out of its type's range",
            Refused::ReplyTooLarge => "reply over the interface's limit",
        }
    }
}

/// Reads a request's arguments in place (server side).
#[derive(Debug)]
pub struct Cursor<'a> {
    fixed: &'a [u8],
    tail: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// Splits `body` into its fixed part of `fixed` bytes and its tail.
    #[inline(always)]
    pub fn new(body: &'a [u8], fixed: usize) -> Result<Self, Refused> {
        if body.len() < fixed {
            return Err(Refused::Short);
        }
        let (fixed, tail) = body.split_at(fixed);
        Ok(Cursor { fixed, tail })
    }

    /// The next plain-data argument.
    #[inline(always)]
    pub fn fixed<V: TryFromBytes>(&mut self) -> Result<V, Refused> {
        let n = std::mem::size_of::<V>();
        let (v, rest) = self.fixed.split_at_checked(n).ok_or(Refused::Short)?;
        self.fixed = rest;
        V::try_read_from_bytes(v).map_err(|_| Refused::BadValue)
    }

    /// The next length in the fixed part.
    #[inline(always)]
    pub fn len(&mut self) -> Result<usize, Refused> {
        Ok(self.fixed::<u32>()? as usize)
    }

    /// Whether the fixed part is used up.
    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty()
    }

    /// The next variable argument's bytes, from the tail.
    #[inline(always)]
    pub fn bytes(&mut self) -> Result<&'a [u8], Refused> {
        let n = self.len()?;
        let (v, rest) = self.tail.split_at_checked(n).ok_or(Refused::TooLong)?;
        self.tail = rest;
        Ok(v)
    }

    /// The next variable argument as UTF-8.
    #[inline(always)]
    pub fn str(&mut self) -> Result<&'a str, Refused> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Refused::BadValue)
    }

    /// Checks that every byte was used.
    #[inline(always)]
    pub fn finish(self) -> Result<(), Refused> {
        if self.fixed.is_empty() && self.tail.is_empty() {
            Ok(())
        } else {
            Err(Refused::Trailing)
        }
    }
}

/// A reply being written in place (server side).
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::Reply;
/// let mut buf = [0u8; 16];
/// let mut r = Reply::new(&mut buf);
/// r.out_area(2)?.copy_from_slice(b"hi");
/// r.put_fixed(&7u32)?;
/// assert_eq!(r.len(), 6);
/// assert!(r.put_var(&[0; 16]).is_err()); // over the room
/// # Ok::<(), shmpipe::rpc::Refused>(())
/// ```
#[derive(Debug)]
pub struct Reply<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Reply<'a> {
    /// A reply written into `buf` (its room is the limit).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::Reply;
    /// let mut buf = [0u8; 4];
    /// let mut r = Reply::new(&mut buf);
    /// assert!(r.put_fixed(&1u32).is_ok());
    /// assert!(r.put_fixed(&1u8).is_err()); // past the 4 bytes of room
    /// ```
    pub fn new(buf: &'a mut [u8]) -> Self {
        Reply { buf, len: 0 }
    }

    /// Bytes written.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::Reply;
    /// let mut buf = [0u8; 8];
    /// let mut r = Reply::new(&mut buf);
    /// r.put_fixed(&1u16)?;
    /// assert_eq!(r.len(), 2);
    /// # Ok::<(), shmpipe::rpc::Refused>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::Reply;
    /// let mut buf = [0u8; 8];
    /// let mut r = Reply::new(&mut buf);
    /// assert!(r.is_empty());
    /// r.put_fixed(&true)?;
    /// assert!(!r.is_empty());
    /// # Ok::<(), shmpipe::rpc::Refused>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room for the out buffers, `n` bytes, for the method to fill.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::{Refused, Reply};
    /// let mut buf = [0u8; 8];
    /// let mut r = Reply::new(&mut buf);
    /// r.out_area(3)?.copy_from_slice(b"abc");
    /// assert_eq!(r.out_area(6).unwrap_err(), Refused::TooLong);
    /// assert_eq!(&buf[..3], b"abc");
    /// # Ok::<(), Refused>(())
    /// ```
    #[inline(always)]
    pub fn out_area(&mut self, n: usize) -> Result<&mut [u8], Refused> {
        let end = self
            .len
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Refused::TooLong)?;
        let area = &mut self.buf[self.len..end];
        self.len = end;
        Ok(area)
    }

    /// Appends a plain-data value.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::{Refused, Reply};
    /// let mut buf = [0u8; 8];
    /// let mut r = Reply::new(&mut buf);
    /// r.put_fixed(&5u64)?;
    /// assert_eq!(r.put_fixed(&0u8).unwrap_err(), Refused::ReplyTooLarge);
    /// assert_eq!(buf, 5u64.to_ne_bytes());
    /// # Ok::<(), Refused>(())
    /// ```
    #[inline(always)]
    pub fn put_fixed<V: IntoBytes + Immutable>(&mut self, v: &V) -> Result<(), Refused> {
        self.put_raw(v.as_bytes())
    }

    /// Appends a length-prefixed byte string.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe::rpc::Reply;
    /// let mut buf = [0u8; 8];
    /// let mut r = Reply::new(&mut buf);
    /// r.put_var(b"hi")?;
    /// assert_eq!(r.len(), 4 + 2); // a u32 length, then the bytes
    /// assert_eq!(&buf[..4], &2u32.to_ne_bytes());
    /// assert_eq!(&buf[4..6], b"hi");
    /// # Ok::<(), shmpipe::rpc::Refused>(())
    /// ```
    #[inline(always)]
    pub fn put_var(&mut self, v: &[u8]) -> Result<(), Refused> {
        let n = u32::try_from(v.len()).map_err(|_| Refused::ReplyTooLarge)?;
        self.put_raw(&n.to_ne_bytes())?;
        self.put_raw(v)
    }

    #[inline(always)]
    fn put_raw(&mut self, v: &[u8]) -> Result<(), Refused> {
        let end = self
            .len
            .checked_add(v.len())
            .filter(|&e| e <= self.buf.len())
            .ok_or(Refused::ReplyTooLarge)?;
        self.buf[self.len..end].copy_from_slice(v);
        self.len = end;
        Ok(())
    }
}
