// The "reassign" mode: AlterPartitionReassignments (kmsg AlterPartitionAssignments) for one
// partition of -topic, then ListPartitionReassignments of the topic, through the client's
// routing to the controller, as kadm.AlterPartitionAssignments / ListPartitionReassignments
// send them. Prints {"ev":"resp","api":NAME,"body":RESPONSE} per response.
package main

import (
	"context"
	"flag"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	reassignPartition = flag.Int("reassign-partition", 0, "reassign: partition")
	reassignReplicas  = flag.String("reassign-replicas", "", "reassign: target broker ids 1,2,3; \"cancel\" cancels; empty only lists")
)

func reassignSteps(ctx context.Context, cl *kgo.Client) {
	if *reassignReplicas != "" {
		req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
		t := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		t.Topic = *topic
		p := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		p.Partition = int32(*reassignPartition)
		if *reassignReplicas != "cancel" {
			p.Replicas = []int32{}
			for _, s := range strings.Split(*reassignReplicas, ",") {
				id, err := strconv.Atoi(s)
				if err != nil {
					fail("usage", err)
				}
				p.Replicas = append(p.Replicas, int32(id))
			}
		}
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		r, err := req.RequestWith(ctx, cl)
		if err != nil {
			fail("alter", err)
		}
		resp("AlterPartitionReassignments", r)
	}
	list := kmsg.NewPtrListPartitionReassignmentsRequest()
	lt := kmsg.NewListPartitionReassignmentsRequestTopic()
	lt.Topic = *topic
	lt.Partitions = []int32{int32(*reassignPartition)}
	list.Topics = append(list.Topics, lt)
	r, err := list.RequestWith(ctx, cl)
	if err != nil {
		fail("list", err)
	}
	resp("ListPartitionReassignments", r)
}
