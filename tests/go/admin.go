// The "admin" mode: raw kmsg requests for the admin APIs of issue 11 (DescribeTopicPartitions
// with paging, DescribeLogDirs, DescribeProducers, ListTransactions, DescribeTransactions,
// ElectLeaders), sent straight to the one broker (no client-side sharding, so the broker's own
// answers for unknown topics and partitions are seen). Each response is printed as
// {"ev":"resp","api":NAME,"body":RESPONSE} for the test to normalise and compare.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

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
