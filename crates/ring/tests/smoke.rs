//! Quick single-thread checks of the ring ends over heap memory.

use shmpipe_ring::local::channel;

#[test]
fn bytes_and_messages_round_trip() {
    let (mut tx, mut rx) = channel(64).unwrap();
    tx.push(b"hello");
    assert!(!tx.publish());
    let mut buf = [0u8; 16];
    assert_eq!(rx.available(1).unwrap(), 5);
    assert_eq!(rx.pop(&mut buf), 5);
    assert_eq!(&buf[..5], b"hello");
    assert!(!rx.publish());
    for n in [0usize, 1, 7, 8, 9, 56] {
        let msg: Vec<u8> = (0..n as u8).collect();
        assert!(tx.free(64).unwrap() >= shmpipe_ring::frame::frame_len(n));
        tx.push_message(&msg);
        let _ = tx.publish();
        let len = rx.next_message().unwrap().unwrap();
        assert_eq!(len, n);
        let mut got = vec![0u8; len];
        rx.peek(shmpipe_ring::frame::HEADER, &mut got);
        assert_eq!(got, msg);
        rx.consume_message(len);
        let _ = rx.publish();
    }
    assert_eq!(rx.next_message().unwrap(), None);
}
