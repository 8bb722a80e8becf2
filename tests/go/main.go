// Command franz is the franz-go client of kmirror's integration tests (tests/src/golang.rs).
//
// Usage: franz -mode produce|consume|txn|brokercfg|admin -bootstrap ADDR -topic T [security flags] [mode flags]
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
	"github.com/twmb/franz-go/pkg/kmsg"
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
	brokerID  = flag.String("broker", "1", "brokercfg: broker id")
	cfgKey    = flag.String("config", "", "brokercfg: config name")
	cfgV1     = flag.String("v1", "", "brokercfg: value set on the broker")
	cfgV2     = flag.String("v2", "", "brokercfg: value set on the cluster-wide default")
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
	case "brokercfg":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		brokerConfigSteps(ctx, cl)
		cl.Close()
	case "admin":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		adminSteps(ctx, cl)
		cl.Close()
	case "reassign":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		reassignSteps(ctx, cl)
		cl.Close()
	case "badts":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		badTimestampSteps(ctx, cl)
		cl.Close()
	case "features":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		featureSteps(ctx, cl)
		cl.Close()
	case "rmvoter":
		cl, err := kgo.NewClient(o...)
		if err != nil {
			fail("client", err)
		}
		removeVoterSteps(ctx, cl)
		cl.Close()
	default:
		fail("usage", fmt.Errorf("unknown -mode %q", *mode))
	}
}

// describeKey is the (value, source name) broker -broker reports for -key.
func describeKey(ctx context.Context, cl *kgo.Client) (*string, *string) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeBroker
	r.ResourceName = *brokerID
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		fail("describe", err)
	}
	for _, res := range resp.Resources {
		if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
			fail("describe", err)
		}
		for _, c := range res.Configs {
			if c.Name == *cfgKey {
				src := c.Source.String()
				return c.Value, &src
			}
		}
	}
	return nil, nil
}

// alterKey runs IncrementalAlterConfigs on broker resource name and returns the error name.
func alterKey(ctx context.Context, cl *kgo.Client, name string, op kmsg.IncrementalAlterConfigOp, value *string, validate bool) *string {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.ValidateOnly = validate
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeBroker
	r.ResourceName = name
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name = *cfgKey
	c.Op = op
	c.Value = value
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		fail("alter", err)
	}
	for _, res := range resp.Resources {
		if e := kerr.ErrorForCode(res.ErrorCode); e != nil {
			var ke *kerr.Error
			if errors.As(e, &ke) {
				return &ke.Message
			}
			s := e.Error()
			return &s
		}
	}
	return nil
}

// brokerConfigSteps walks -key through the steps of tests/python/broker_config.py and prints
// {"step","error","value","source"} per step, once the change shows (Kafka applies dynamic
// configs through its metadata log).
func brokerConfigSteps(ctx context.Context, cl *kgo.Client) {
	bad := "not-a-number"
	type st struct {
		name     string
		target   string
		op       kmsg.IncrementalAlterConfigOp
		value    *string
		validate bool
		expect   bool
	}
	steps := []st{
		{"set-broker", *brokerID, kmsg.IncrementalAlterConfigOpSet, cfgV1, false, true},
		{"set-default", "", kmsg.IncrementalAlterConfigOpSet, cfgV2, false, false},
		{"validate-only", *brokerID, kmsg.IncrementalAlterConfigOpSet, cfgV2, true, false},
		{"set-invalid", *brokerID, kmsg.IncrementalAlterConfigOpSet, &bad, false, false},
		{"delete-broker", *brokerID, kmsg.IncrementalAlterConfigOpDelete, nil, false, true},
		{"delete-default", "", kmsg.IncrementalAlterConfigOpDelete, nil, false, true},
	}
	same := func(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }
	for _, s := range steps {
		bv, bs := describeKey(ctx, cl)
		e := alterKey(ctx, cl, s.target, s.op, s.value, s.validate)
		wait := 2 * time.Second
		if s.expect && e == nil {
			wait = 15 * time.Second
		}
		deadline := time.Now().Add(wait)
		v, src := describeKey(ctx, cl)
		for same(v, bv) && same(src, bs) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			v, src = describeKey(ctx, cl)
		}
		// Kafka can report a change in two halves: after a delete it was seen naming the new
		// source with the old value for a moment. Read until two answers agree.
		for settle := time.Now().Add(5 * time.Second); time.Now().Before(settle); {
			time.Sleep(500 * time.Millisecond)
			v2, src2 := describeKey(ctx, cl)
			if same(v2, v) && same(src2, src) {
				break
			}
			v, src = v2, src2
		}
		emit(map[string]any{"step": s.name, "error": e, "value": v, "source": src})
	}
}
