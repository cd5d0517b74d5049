package config

import "reflect"

// RestartField names the first key that differs between a and b outside
// providers and groups, the sections a running node reloads, or "" when
// none does: a node must restart to apply it.
func RestartField(a, b *File) string {
	if a == nil || b == nil {
		return ""
	}
	av, bv := reflect.ValueOf(*a), reflect.ValueOf(*b)
	t := av.Type()
	for i := range t.NumField() {
		tag := yamlName(t.Field(i))
		if tag == "providers" || tag == "groups" {
			continue
		}
		fa, fb := av.Field(i), bv.Field(i)
		if fa.Kind() == reflect.Struct {
			for j := range fa.NumField() {
				if !reflect.DeepEqual(fa.Field(j).Interface(), fb.Field(j).Interface()) {
					return tag + "." + yamlName(fa.Type().Field(j))
				}
			}
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			return tag
		}
	}
	return ""
}

func yamlName(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	for i := range len(tag) {
		if tag[i] == ',' {
			return tag[:i]
		}
	}
	if tag == "" {
		return f.Name
	}
	return tag
}
