package ledger

import (
	"fmt"

	"github.com/llmesh/llmesh/node/journal"
)

// The rate holders by their names in the journal.
const (
	journalProviders = "providers"
	journalSubjects  = "keys"
)

// openJournal opens the spend journal and hands the holders what it
// held: the last boot's escrow, unacknowledged spend and rate shares'
// sends, and the rate holders' boot, which this process takes over.
func (l *Ledger) openJournal() error {
	if l.journalCfg.Dir == "" || l.journal != nil {
		return nil
	}
	j, st, err := journal.Open(l.journalCfg)
	if err != nil {
		return fmt.Errorf("journal.dir: %w", err)
	}
	rec := st.Recovery(l.now())
	if rec.Budget != nil {
		l.budgets.Recover(rec.Budget)
		l.log.Info("spend journal: the last boot's account goes to the ledger with the first sync",
			"component", "journal", "leases", len(rec.Budget.Leases), "spend_reports", len(rec.Budget.Spend))
	}
	if rec.RateBoot != 0 {
		l.client.SetBoot(rec.RateBoot)
		l.rates.Recover(rec.Sent[journalProviders], rec.RateSeq[journalProviders], l.now())
		l.subjects.Recover(rec.Sent[journalSubjects], rec.RateSeq[journalSubjects], l.now())
	}
	l.journal = j
	return nil
}
