package views

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The views' JSON names are the admin API's, which llmesh and users'
// scripts read: each view has exactly these.
func TestJSONNames(t *testing.T) {
	for _, tc := range []struct {
		view  any
		names string // sorted, with their options
	}{
		{Status{}, "admission budget_leases build,omitempty healthy_providers in_flight jurisdiction leader ledger_version,omitempty members node phase raft,omitempty rate_shares ready region role unhealthy_providers uptime_s"},
		{AdmissionInfo{}, "max_wait_s queue_limit waited_seconds_total waited_total waiting"},
		{LeaseInfo{}, "expires_in_s granted_usd inflight_usd period spent_usd tenant"},
		{RateShareInfo{}, "provider rpm spare tpm"},
		{MemberInfo{}, "address build,omitempty http jurisdiction name region rpc,omitempty rtt_ms self,omitempty state voter"},
		{ProviderInfo{}, "jurisdictions kind models name observers reach region view"},
		{ProviderView{}, "cache_hit_ratio cooling_s degraded ejected error_rate latency_ms ttft_ms"},
		{ObserverReport{}, "age_s cooling_s ejected error_rate idle_s latency_ms observer remaining_requests remaining_tokens ttft_ms"},
		{BudgetInfo{}, "expired_leases forfeited_usd leases limit_usd overspend_usd period remaining_usd reserved_usd settled_usd tenant"},
		{TenantInfo{}, "budget_period,omitempty budget_usd,omitempty key_settings,omitempty keys limits,omitempty name residency,omitempty revoked strict_transit,omitempty"},
		{KeyInfo{}, "budget_period,omitempty budget_usd,omitempty id limits,omitempty models name,omitempty source"},
		{LimitsInfo{}, "rpm tpm"},
		{Decision{}, "attempts cached_tokens completion_tokens cost_usd endpoint forwarded_by,omitempty model ms outcome prompt_tokens provider,omitempty replica,omitempty request_id status stream tenant time via,omitempty why"},
		{AttemptView{}, "ms outcome provider status,omitempty"},
		{Explanation{}, "dropped error,omitempty fallback_on,omitempty group,omitempty group_choice,omitempty max_output_tokens model node policy,omitempty prompt_tokens_estimate residency route,omitempty session,omitempty strict_transit,omitempty targets tenant,omitempty"},
		{TargetView{}, "context_fallback,omitempty est_cost_usd latency_ms,omitempty max_cost_usd model provider rank replica,omitempty replica_choice,omitempty ttft_ms,omitempty via via_rtt_ms,omitempty why"},
		{ReplicaChoiceView{}, "cached_tokens engine,omitempty in_flight max_concurrent,omitempty passed_over_full,omitempty policy predicted_ttft_ms,omitempty reason"},
		{EngineView{}, "kv_usage running waiting"},
		{DroppedView{}, "provider reason residency,omitempty retry_in_ms,omitempty"},
		{ExplainError{}, "code message status"},
		{Members{}, "members"},
		{Providers{}, "node providers"},
		{Budgets{}, "budgets consistency"},
		{Tenants{}, "tenants"},
		{Decisions{}, "decisions node"},
		{Series{}, "end_unix forwards providers seconds tenants"},
		{Samples{}, "cached_tokens,omitempty cost_usd,omitempty errors,omitempty latency_ms_sum,omitempty prompt_tokens,omitempty requests,omitempty ttft_count,omitempty ttft_ms_sum,omitempty"},
		{Observation{}, "decisions error,omitempty node rate_shares region series"},
		{MeshObservation{}, "node nodes series"},
		{Spend{}, "by consistency from requests rows series step tenant,omitempty total_nanos total_usd until"},
		{SpendRow{}, "label,omitempty name nanos requests share tenant usd"},
		{SpendPoint{}, "nanos rows_nanos start usd"},
	} {
		typ := reflect.TypeOf(tc.view)
		var got []string
		for i := range typ.NumField() {
			got = append(got, typ.Field(i).Tag.Get("json"))
		}
		slices.Sort(got)
		if strings.Join(got, " ") != tc.names {
			t.Errorf("%s: JSON names %q, want %q", typ.Name(), strings.Join(got, " "), tc.names)
		}
	}
}
