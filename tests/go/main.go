// Command franz is the franz-go client of kmirror's integration tests (tests/src/golang.rs).
//
// Usage: franz -mode produce|consume|txn -bootstrap ADDR -topic T [security flags] [mode flags]
// It prints JSON lines on stdout: {"ev":"ack","p":P,"o":OFFSET,"v":VALUE} per acknowledged
// record, {"ev":"rec",...} per record consumed, {"ev":"committed","o":NEXT} after a group
// commit, {"ev":"commit"} / {"ev":"abort"} per ended transaction and, on failure,
// {"ev":"err","code":"KAFKA_ERROR_NAME","msg":...} with exit status 1.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var (
	bootstrap = flag.String("bootstrap", "", "host:port")
	topic     = flag.String("topic", "", "topic")
	mode      = flag.String("mode", "", "produce|consume|txn")
	caFile    = flag.String("ca", "", "CA PEM: use TLS")
	certFile  = flag.String("cert", "", "client certificate chain PEM (mutual TLS)")
	keyFile   = flag.String("key", "", "client key PEM")
	user      = flag.String("user", "", "SCRAM-SHA-512 user")
	password  = flag.String("password", "", "SCRAM-SHA-512 password")
	n         = flag.Int("n", 10, "records to produce (per transaction) or to consume")
	prefix    = flag.String("prefix", "go", "value prefix")
	group     = flag.String("group", "", "consumer group")
	committed = flag.Bool("read-committed", false, "consume with read_committed")
	txnID     = flag.String("txn-id", "", "transactional id")
)

func emit(m map[string]any) {
	b, _ := json.Marshal(m)
	fmt.Println(string(b))
}

// fail prints the Kafka error name of err (or its text) and exits 1.
func fail(stage string, err error) {
	code := "OTHER"
	var ke *kerr.Error
	if errors.As(err, &ke) {
		code = ke.Message
	}
	emit(map[string]any{"ev": "err", "stage": stage, "code": code, "msg": err.Error()})
	os.Exit(1)
}

func opts() []kgo.Opt {
	o := []kgo.Opt{
		kgo.SeedBrokers(*bootstrap),
		kgo.RequestTimeoutOverhead(5 * time.Second),
		kgo.RetryTimeout(20 * time.Second),
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("config", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if *certFile != "" {
			c, err := tls.LoadX509KeyPair(*certFile, *keyFile)
			if err != nil {
				fail("config", err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		o = append(o, kgo.DialTLSConfig(cfg))
	}
	if *user != "" {
		o = append(o, kgo.SASL(scram.Auth{User: *user, Pass: *password}.AsSha512Mechanism()))
	}
	return o
}

func produce(ctx context.Context, cl *kgo.Client, kind string) {
	for i := 0; i < *n; i++ {
		v := fmt.Sprintf("%s:%s:%d", *prefix, kind, i)
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: *topic, Value: []byte(v)}).First()
		if err != nil {
			fail("produce", err)
		}
		emit(map[string]any{"ev": "ack", "p": r.Partition, "o": r.Offset, "v": v})
	}
}

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := opts()
	switch *mode {
	case "produce":
		cl, err := kgo.NewClient(append(o, kgo.ProducerLinger(0))...)
		if err != nil {
			fail("client", err)
		}
		produce(ctx, cl, "p")
		cl.Close()
	case "txn":
		// Commit, abort, commit: each transaction writes n records.
		cl, err := kgo.NewClient(append(o, kgo.TransactionalID(*txnID), kgo.ProducerLinger(0))...)
		if err != nil {
			fail("client", err)
		}
		for i, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
			if err := cl.BeginTransaction(); err != nil {
				fail("begin", err)
			}
			kind := fmt.Sprintf("c%d", i)
			if end == kgo.TryAbort {
				kind = fmt.Sprintf("a%d", i)
			}
			produce(ctx, cl, kind)
			if err := cl.EndTransaction(ctx, end); err != nil {
				fail("end", err)
			}
			if end == kgo.TryAbort {
				emit(map[string]any{"ev": "abort"})
			} else {
				emit(map[string]any{"ev": "commit"})
			}
		}
		cl.Close()
	case "consume":
		co := append(o,
			kgo.ConsumeTopics(*topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		if *group != "" {
			// Commits are explicit, after every record was printed.
			co = append(co, kgo.ConsumerGroup(*group), kgo.DisableAutoCommit())
		}
		if *committed {
			co = append(co, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		}
		cl, err := kgo.NewClient(co...)
		if err != nil {
			fail("client", err)
		}
		got := 0
		for got < *n {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				fail("poll", fmt.Errorf("timeout after %d of %d records", got, *n))
			}
			for _, fe := range fs.Errors() {
				fail("poll", fe.Err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				got++
				emit(map[string]any{"ev": "rec", "p": r.Partition, "o": r.Offset, "v": string(r.Value)})
			})
		}
		if *group != "" {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				fail("commit", err)
			}
			for _, ps := range cl.CommittedOffsets() {
				for p, off := range ps {
					emit(map[string]any{"ev": "committed", "p": p, "o": off.Offset})
				}
			}
		}
		cl.Close()
	default:
		fail("usage", fmt.Errorf("unknown -mode %q", *mode))
	}
}
