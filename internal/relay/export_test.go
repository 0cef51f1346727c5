package relay

import "encoding/json"

// SealedControl is a control message of kind on sessionID (a Stop's request id stop, who by),
// sealed under the relay keys of shared key key and signed now, as a replica holding the key
// would send it: tests forge what only a key holder could.
func SealedControl(key []byte, kind, sessionID, by, stop string) string {
	r := &Relay{keys: deriveKeys(key), id: "forger"}
	p, _ := r.signed(message{Origin: r.id, Kind: kind, Session: sessionID, By: by, Stop: stop})
	return p
}

// SealedEvent is an event of sessionID with number seq (0: a delta's notification), sealed under
// the relay keys of shared key key.
func SealedEvent(key []byte, sessionID string, seq int64, event string) string {
	r := &Relay{keys: deriveKeys(key), id: "forger"}
	p, _ := r.signed(message{Origin: r.id, Session: sessionID, Seq: seq, Event: json.RawMessage(event)})
	return p
}

// KindStop is the relay's Stop kind, for tests that forge one.
const KindStop = kindStop
