import type {z} from 'zod';

// Remotion 4.0.529 only uses a <Composition schema> for the Studio editor; it
// does NOT validate inputProps at selectComposition()/renderMedia() time.
// Compositions call this from calculateMetadata (which runs inside
// selectComposition) so bad props fail before any frame is rendered, with a
// message naming every bad field. The render worker classifies errors whose
// message starts with "Invalid props for " as kind "invalid-props".
export const validateProps = <T extends z.ZodType>(
	compositionId: string,
	schema: T,
	props: unknown,
): z.infer<T> => {
	const result = schema.safeParse(props);
	if (result.success) {
		return result.data;
	}
	const issues = result.error.issues
		.map((issue) => {
			const where = issue.path.length === 0 ? '(props)' : issue.path.join('.');
			return `${where}: ${issue.message}`;
		})
		.join('; ');
	throw new Error(`Invalid props for ${compositionId}: ${issues}`);
};
