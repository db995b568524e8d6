package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	jittered := Exponential{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	steady := Exponential{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 1.5}
	tests := map[string]struct {
		e       Exponential
		attempt int
		r       float64
		want    time.Duration
	}{
		"the first retry waits at least half the initial delay": {jittered, 0, 0, 50 * time.Millisecond},
		"the first retry waits less than the initial delay":     {jittered, 0, 0.999, 99950 * time.Microsecond},
		"each failure doubles the delay":                        {jittered, 2, 0, 200 * time.Millisecond},
		"the delay is capped at max":                            {jittered, 10, 0.5, 750 * time.Millisecond},
		"a huge attempt count stays capped":                     {jittered, 1 << 30, 0, 500 * time.Millisecond},
		"without jitter the first delay is the initial one":     {steady, 0, 0, 10 * time.Millisecond},
		"without jitter r does not matter":                      {steady, 0, 0.7, 10 * time.Millisecond},
		"a multiplier of 1.5 grows the delay by half":           {steady, 2, 0, 22500 * time.Microsecond},
		"without jitter the cap is reached exactly":             {steady, 20, 0, 200 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.e.Delay(tc.attempt, tc.r); got != tc.want {
				t.Errorf("Delay(%d, %v) = %s, want %s", tc.attempt, tc.r, got, tc.want)
			}
		})
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep(1ms) = false with a live context")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(1h) = true with an ended context")
	}
	if time.Since(start) > time.Minute {
		t.Error("Sleep did not return when its context ended")
	}
}
