package nvmlsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/muxflow/muxflow/gpusim/simd"
)

// conn is one long-lived JSON-lines connection to gpusimd, shared by every call of the
// adapter: gpusimd answers any number of requests on a connection, and a connection per
// request (simclient's way) cost a socket, a connect and an accept on both sides ten or
// more times a second per sampler. Requests can be pipelined: several written at once,
// their answers read in order, in one round trip. A broken connection (gpusimd
// restarted) is dialled again once per call.
type conn struct {
	socket string

	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader // gpusimd's answers, one JSON line each
	// line holds an answer longer than r's buffer while it is read.
	line []byte
	// out holds the requests of one round trip, written by enc (one line each), kept
	// between calls: a sampler sends one ten times a second.
	out bytes.Buffer
	enc *json.Encoder
}

// roundTrip sends qs and returns their answers, in order. An answer carrying an error
// is returned as it is, with err nil: the caller decides what each means.
func (c *conn) roundTrip(ctx context.Context, qs ...simd.Request) ([]simd.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, err := c.try(ctx, qs)
	if err != nil && !errors.Is(err, errFreshConn) && ctx.Err() == nil {
		out, err = c.try(ctx, qs) // once more on a fresh connection
	}
	return out, err
}

func (c *conn) try(ctx context.Context, qs []simd.Request) ([]simd.Response, error) {
	fresh := false
	if c.c == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "unix", c.socket)
		if err != nil {
			return nil, fmt.Errorf("reach gpusimd at %s: %w", c.socket, err)
		}
		c.c, c.r, fresh = nc, bufio.NewReaderSize(nc, 64<<10), true
	}
	fail := func(err error) ([]simd.Response, error) {
		c.c.Close()
		c.c, c.r = nil, nil
		if fresh {
			// Not worth a second try: the connection was new.
			return nil, errors.Join(err, errFreshConn)
		}
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(2 * time.Second)
	}
	_ = c.c.SetDeadline(dl)
	if c.enc == nil {
		c.enc = json.NewEncoder(&c.out)
	}
	c.out.Reset()
	for _, q := range qs {
		if err := c.enc.Encode(q); err != nil {
			return nil, err
		}
	}
	if _, err := c.c.Write(c.out.Bytes()); err != nil {
		return fail(fmt.Errorf("send to gpusimd: %w", err))
	}
	out := make([]simd.Response, len(qs))
	for i := range out {
		if err := c.readAnswer(&out[i]); err != nil {
			return fail(fmt.Errorf("read gpusimd's answer to %s: %w", qs[i].Op, err))
		}
	}
	return out, nil
}

var errFreshConn = errors.New("(on a new connection)")

// packedAnswer opens the line gpusimd writes for a packed "stats" answer.
var packedAnswer = []byte(`{"packed":"`)

// readAnswer reads one answer line into into. A sampler's two answers ten times a second
// are nearly always a packed "stats" ({"packed":"BASE64"}) and no new Xids ({}): those are
// taken apart without encoding/json's reflection, which was most of what decoding cost;
// any other line is decoded by encoding/json.
func (c *conn) readAnswer(into *simd.Response) error {
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		c.line = append(c.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = c.r.ReadSlice('\n')
			c.line = append(c.line, line...)
		}
		line = c.line
	}
	if err != nil {
		return err
	}
	body := bytes.TrimSpace(line)
	*into = simd.Response{}
	if string(body) == "{}" {
		return nil
	}
	if b64, ok := bytes.CutPrefix(body, packedAnswer); ok {
		if b64, ok = bytes.CutSuffix(b64, []byte(`"}`)); ok && bytes.IndexByte(b64, '\\') < 0 && bytes.IndexByte(b64, '"') < 0 {
			into.Packed = make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
			n, err := base64.StdEncoding.Decode(into.Packed, b64)
			if err != nil {
				return fmt.Errorf("packed stats: %w", err)
			}
			into.Packed = into.Packed[:n]
			return nil
		}
	}
	return json.Unmarshal(body, into)
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		c.c.Close()
		c.c, c.r = nil, nil
	}
}

// one sends a single request; an answer's error becomes err.
func (c *conn) one(ctx context.Context, q simd.Request) (*simd.Response, error) {
	rs, err := c.roundTrip(ctx, q)
	if err != nil {
		return nil, err
	}
	if rs[0].Error != "" {
		return &rs[0], fmt.Errorf("gpusimd %s: %s", q.Op, rs[0].Error)
	}
	return &rs[0], nil
}
