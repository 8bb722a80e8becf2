// The "rmvoter" mode: KIP-853's RemoveRaftVoter (kmsg.RemoveRaftVoterRequest) sent to the
// broker -broker names, for -voter-id with directory id -voter-dir (Kafka's base64url
// text); prints {"ev":"resp","api":"RemoveRaftVoter","body":RESPONSE}.
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	voterID  = flag.Int("voter-id", -1, "rmvoter: the voter's node id")
	voterDir = flag.String("voter-dir", "", "rmvoter: the voter's directory id (base64url)")
)

func removeVoterSteps(ctx context.Context, cl *kgo.Client) {
	meta := kmsg.NewPtrMetadataRequest()
	if _, err := meta.RequestWith(ctx, cl); err != nil {
		fail("metadata", err)
	}
	target, err := strconv.Atoi(*brokerID)
	if err != nil {
		fail("broker", err)
	}
	dir, err := base64.RawURLEncoding.DecodeString(*voterDir)
	if err != nil || len(dir) != 16 {
		fail("voter-dir", fmt.Errorf("%q is not a 16-byte base64url id: %v", *voterDir, err))
	}
	req := kmsg.NewPtrRemoveRaftVoterRequest()
	req.VoterID = int32(*voterID)
	copy(req.VoterDirectoryID[:], dir)
	r, err := cl.Broker(target).Request(ctx, req)
	if err != nil {
		fail("RemoveRaftVoter", err)
	}
	resp("RemoveRaftVoter", r)
}
