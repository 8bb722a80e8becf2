// The "admin" mode: raw kmsg requests for the admin APIs of issue 11 (DescribeTopicPartitions
// with paging, DescribeLogDirs, DescribeProducers, ListTransactions, DescribeTransactions,
// ElectLeaders), sent straight to the one broker (no client-side sharding, so the broker's own
// answers for unknown topics and partitions are seen). Each response is printed as
// {"ev":"resp","api":NAME,"body":RESPONSE} for the test to normalise and compare.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	adminTopics = flag.String("admin-topics", "", "admin: comma-separated topics to describe")
	txnTopic    = flag.String("txn-topic", "", "admin: topic the open transaction writes")
)

func resp(api string, r kmsg.Response) {
	b, err := json.Marshal(r)
	if err != nil {
		fail("json", err)
	}
	fmt.Printf("{\"ev\":\"resp\",\"api\":%q,\"body\":%s}\n", api, b)
}

func adminSteps(ctx context.Context, cl *kgo.Client) {
	meta := kmsg.NewPtrMetadataRequest()
	if _, err := meta.RequestWith(ctx, cl); err != nil {
		fail("metadata", err)
	}
	brokers := cl.DiscoveredBrokers()
	if len(brokers) != 1 {
		fail("metadata", fmt.Errorf("expected one broker, got %d", len(brokers)))
	}
	b := brokers[0]
	send := func(api string, req kmsg.Request) {
		r, err := b.Request(ctx, req)
		if err != nil {
			fail(api, err)
		}
		resp(api, r)
	}
	names := strings.Split(*adminTopics, ",")

	// DescribeTopicPartitions, two partitions a page, following the cursor.
	var cursor *kmsg.DescribeTopicPartitionsRequestCursor
	for page := 0; page < 20; page++ {
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		for _, n := range names {
			t := kmsg.NewDescribeTopicPartitionsRequestTopic()
			t.Topic = n
			req.Topics = append(req.Topics, t)
		}
		req.ResponsePartitionLimit = 2
		req.Cursor = cursor
		r, err := b.Request(ctx, req)
		if err != nil {
			fail("dtp", err)
		}
		resp("DescribeTopicPartitions.page", r)
		next := r.(*kmsg.DescribeTopicPartitionsResponse).NextCursor
		if next == nil {
			break
		}
		cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: next.Topic, Partition: next.Partition}
	}
	{
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		t := kmsg.NewDescribeTopicPartitionsRequestTopic()
		t.Topic = "no-such-topic"
		req.Topics = append(req.Topics, t)
		req.ResponsePartitionLimit = 2000
		send("DescribeTopicPartitions.unknown", req)
	}
	{
		req := kmsg.NewPtrDescribeLogDirsRequest()
		for _, n := range names {
			t := kmsg.NewDescribeLogDirsRequestTopic()
			t.Topic = n
			t.Partitions = []int32{0, 1, 2, 7}
			req.Topics = append(req.Topics, t)
		}
		send("DescribeLogDirs", req)
	}
	{
		req := kmsg.NewPtrDescribeProducersRequest()
		t := kmsg.NewDescribeProducersRequestTopic()
		t.Topic = *txnTopic
		t.Partitions = []int32{0, 1, 5}
		req.Topics = append(req.Topics, t)
		u := kmsg.NewDescribeProducersRequestTopic()
		u.Topic = "no-such-topic"
		u.Partitions = []int32{0}
		req.Topics = append(req.Topics, u)
		send("DescribeProducers", req)
	}
	{
		req := kmsg.NewPtrListTransactionsRequest()
		send("ListTransactions.all", req)
		req = kmsg.NewPtrListTransactionsRequest()
		req.StateFilters = []string{"Ongoing", "NoSuchState"}
		send("ListTransactions.ongoing", req)
		req = kmsg.NewPtrListTransactionsRequest()
		req.StateFilters = []string{"CompleteCommit"}
		send("ListTransactions.completed", req)
	}
	{
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{*txnID, "no-such-txn"}
		send("DescribeTransactions", req)
	}
	{
		req := kmsg.NewPtrElectLeadersRequest()
		req.ElectionType = 0
		for _, n := range append(names, "no-such-topic") {
			t := kmsg.NewElectLeadersRequestTopic()
			t.Topic = n
			t.Partitions = []int32{0, 9}
			req.Topics = append(req.Topics, t)
		}
		send("ElectLeaders.named", req)
		req = kmsg.NewPtrElectLeadersRequest()
		req.ElectionType = 0
		req.Topics = nil
		send("ElectLeaders.all", req)
	}
}

var featureUpdates = flag.String("updates", "", "features: ';'-separated updates, each 'name=level/type[/validate]' sent as one UpdateFeatures request")

// featureSteps prints ApiVersions' features, then sends each UpdateFeatures request of
// -updates (type: 1 upgrade, 2 safe downgrade, 3 unsafe downgrade; several updates of one
// request separated by ',').
func featureSteps(ctx context.Context, cl *kgo.Client) {
	meta := kmsg.NewPtrMetadataRequest()
	if _, err := meta.RequestWith(ctx, cl); err != nil {
		fail("metadata", err)
	}
	b := cl.DiscoveredBrokers()[0]
	av := kmsg.NewPtrApiVersionsRequest()
	av.ClientSoftwareName = "franz"
	av.ClientSoftwareVersion = "1"
	r, err := b.Request(ctx, av)
	if err != nil {
		fail("apiversions", err)
	}
	a := r.(*kmsg.ApiVersionsResponse)
	resp("ApiVersions.features", &kmsg.ApiVersionsResponse{
		SupportedFeatures: a.SupportedFeatures,
		FinalizedFeatures: a.FinalizedFeatures,
	})
	if *featureUpdates == "" {
		return
	}
	for _, reqText := range strings.Split(*featureUpdates, ";") {
		req := kmsg.NewPtrUpdateFeaturesRequest()
		req.TimeoutMillis = 30000
		for _, u := range strings.Split(reqText, ",") {
			var name string
			var level int16
			var kind int8
			parts := strings.Split(u, "/")
			if _, err := fmt.Sscanf(strings.Replace(parts[0], "=", " ", 1)+" "+parts[1], "%s %d %d", &name, &level, &kind); err != nil {
				fail("updates", err)
			}
			if len(parts) > 2 {
				req.ValidateOnly = true
			}
			f := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
			f.Feature = name
			f.MaxVersionLevel = level
			f.UpgradeType = kind
			f.AllowDowngrade = kind > 1
			req.FeatureUpdates = append(req.FeatureUpdates, f)
		}
		r, err := b.Request(ctx, req)
		if err != nil {
			fail("updatefeatures", err)
		}
		resp("UpdateFeatures "+reqText, r)
	}
}

var (
	tsTopics = flag.String("ts-topics", "", "badts: topic with default timestamp bounds, topic with message.timestamp.before.max.ms=60000")
)

// batchOf is an uncompressed magic-2 batch of one record per timestamp (no producer id).
func batchOf(ts []int64) []byte {
	var recs []byte
	maxTs := ts[0]
	for i, t := range ts {
		if t > maxTs {
			maxTs = t
		}
		r := kmsg.Record{TimestampDelta64: t - ts[0], OffsetDelta: int32(i), Value: []byte(fmt.Sprintf("v%d", i))}
		body := r.AppendTo(nil)
		r.Length = int32(len(body) - 1) // the zero length varint is one byte
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(ts) - 1),
		FirstTimestamp:       ts[0],
		MaxTimestamp:         maxTs,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(ts)),
		Records:              recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// badTimestampSteps sends Produce requests holding records outside the timestamp bounds and
// prints the answers (KIP-467 record errors).
func badTimestampSteps(ctx context.Context, cl *kgo.Client) {
	topics := strings.Split(*tsTopics, ",")
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, mt)
	}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		fail("metadata", err)
	}
	// Produce v13 names topics by id.
	ids := map[string][16]byte{}
	for _, t := range mresp.Topics {
		if t.Topic != nil {
			ids[*t.Topic] = t.TopicID
		}
	}
	b := cl.DiscoveredBrokers()[0]
	now := time.Now().UnixMilli()
	hour := int64(3600 * 1000)
	for i, c := range []struct {
		topic string
		ts    []int64
	}{
		{topics[0], []int64{now, now + 2*hour, now, now + 3*hour}},
		{topics[0], []int64{now, now + 1000}},
		{topics[1], []int64{now - hour, now}},
	} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 30000
		t := kmsg.NewProduceRequestTopic()
		t.Topic = c.topic
		t.TopicID = ids[c.topic]
		p := kmsg.NewProduceRequestTopicPartition()
		p.Partition = 0
		p.Records = batchOf(c.ts)
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		r, err := b.Request(ctx, req)
		if err != nil {
			fail("produce", err)
		}
		resp(fmt.Sprintf("Produce.%d", i), r)
	}
	// OffsetCommit (a simple commit: no member, generation -1) naming an existing and a
	// missing topic, then what the group holds.
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "step6-group"
	commit.Generation = -1
	for _, t := range []string{topics[0], "no-such-topic"} {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = t
		for p := int32(0); p < 2; p++ {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition = p
			cp.Offset = 1
			ct.Partitions = append(ct.Partitions, cp)
		}
		commit.Topics = append(commit.Topics, ct)
	}
	cresp, err := commit.RequestWith(ctx, cl)
	if err != nil {
		fail("commit", err)
	}
	resp("OffsetCommit", cresp)
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "step6-group"
	fresp, err := fetch.RequestWith(ctx, cl)
	if err != nil {
		fail("offsetfetch", err)
	}
	resp("OffsetFetch", fresp)
}
