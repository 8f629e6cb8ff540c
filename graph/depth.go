package graph

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// DepthLimit is a gqlgen extension that refuses an operation whose selections nest
// deeper than Max; gqlgen has no depth limit of its own. A field counts one level;
// fragments and inline fragments count nothing themselves. It runs after validation,
// so fragment cycles are already refused; each fragment's depth is computed once.
type DepthLimit struct {
	Max int
}

var (
	_ graphql.HandlerExtension        = DepthLimit{}
	_ graphql.OperationContextMutator = DepthLimit{}
)

// ExtensionName implements graphql.HandlerExtension.
func (DepthLimit) ExtensionName() string { return "DepthLimit" }

// Validate implements graphql.HandlerExtension.
func (d DepthLimit) Validate(graphql.ExecutableSchema) error {
	if d.Max < 1 {
		return fmt.Errorf("DepthLimit.Max must be positive, got %d", d.Max)
	}
	return nil
}

// MutateOperationContext implements graphql.OperationContextMutator.
func (d DepthLimit) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	var frags ast.FragmentDefinitionList
	if oc.Doc != nil {
		frags = oc.Doc.Fragments
	}
	if depth := selectionDepth(oc.Operation.SelectionSet, frags, map[string]int{}); depth > d.Max {
		err := gqlerror.Errorf("the operation nests %d levels deep; at most %d are allowed", depth, d.Max)
		errcode.Set(err, errcode.ValidationFailed)
		return err
	}
	return nil
}

// selectionDepth returns the depth of set. memo holds the depth of each fragment
// already measured, -1 while it is being measured, which a cycle would meet.
func selectionDepth(set ast.SelectionSet, frags ast.FragmentDefinitionList, memo map[string]int) int {
	deepest := 0
	for _, sel := range set {
		d := 0
		switch s := sel.(type) {
		case *ast.Field:
			d = 1 + selectionDepth(s.SelectionSet, frags, memo)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, frags, memo)
		case *ast.FragmentSpread:
			if v, ok := memo[s.Name]; ok {
				d = max(v, 0)
				break
			}
			def := frags.ForName(s.Name)
			if def == nil {
				break
			}
			memo[s.Name] = -1
			d = selectionDepth(def.SelectionSet, frags, memo)
			memo[s.Name] = d
		}
		deepest = max(deepest, d)
	}
	return deepest
}
